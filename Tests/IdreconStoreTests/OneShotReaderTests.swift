import Foundation
import IdreconIngest
import IdreconStore
import Testing

/// A command's store (`concurrentReads: false`): one connection, each read a transaction of its own,
/// so it reads what a writer committed since its last read, as a pool's readers do; or, once it reads one
/// state (`readOneState`, a query's), every read answers from that state.
@Suite struct OneShotReaderTests {
    /// A database of three events and its writer.
    private func logOfThree() throws -> (dir: TempDir, path: String, writer: EventStore, ingestor: FileIngestor) {
        let dir = TempDir()
        let path = dir.path("db.sqlite")
        let writer = try EventStore(path: path)
        let ingestor = FileIngestor(store: writer)
        _ = try ingestor.ingest(path: dir.write("a.jsonl", (1...3).map { eventLine("e\($0)") }))
        return (dir, path, writer, ingestor)
    }

    @Test func aOneShotReaderReadsWhatAWriterCommitsBetweenItsReads() throws {
        let (dir, path, writer, ingestor) = try logOfThree()
        let reader = try EventStore(path: path, readOnly: true, concurrentReads: false)
        let pooled = try EventStore(path: path, readOnly: true)
        #expect(try reader.stats().events == 3)
        _ = try ingestor.ingest(path: dir.write("b.jsonl", (4...6).map { eventLine("e\($0)", ["asid": "4242"]) }))
        #expect(try reader.stats().events == 6)
        #expect(try reader.access("4242") == pooled.access("4242"))
        #expect(try reader.projectionDigests() == pooled.projectionDigests())
        #expect(try reader.projectionDigests() == writer.projectionDigests())
    }

    @Test func aQueryReadsOneStateWhateverAWriterCommitsMeanwhile() throws {
        let (dir, path, writer, ingestor) = try logOfThree()
        let before = try writer.projectionDigests()
        var query: EventStore? = try EventStore(path: path, readOnly: true, concurrentReads: false)
        try query?.readOneState()
        _ = try ingestor.ingest(path: dir.write("b.jsonl", (4...6).map { eventLine("e\($0)", ["asid": "4242"]) }))
        #expect(try writer.stats().events == 6)
        #expect(try query?.stats().events == 3)
        #expect(try query?.access("4242").state == .unseen)
        #expect(try query?.access(["4242"] + (0..<200).map { "a\($0)" }, asOf: nil).answers.first?.state == .unseen)
        #expect(try query?.projectionDigests() == before)
        query = nil // the open transaction ends with its connection
        _ = try ingestor.ingest(path: dir.write("c.jsonl", [eventLine("e7")]))
        #expect(try EventStore(path: path, readOnly: true, concurrentReads: false).stats().events == 7)
    }
}
