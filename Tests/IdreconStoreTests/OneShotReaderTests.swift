import Foundation
import IdreconIngest
import IdreconStore
import Testing

/// A query's store (`concurrentReads: false`): one connection, each read a transaction of its own,
/// so it reads what a writer committed since its last read, as a pool's readers do.
@Suite struct OneShotReaderTests {
    @Test func aOneShotReaderReadsWhatAWriterCommitsBetweenItsReads() throws {
        let dir = TempDir()
        let path = dir.path("db.sqlite")
        let writer = try EventStore(path: path)
        let ingestor = FileIngestor(store: writer)
        _ = try ingestor.ingest(path: dir.write("a.jsonl", (1...3).map { eventLine("e\($0)") }))
        let reader = try EventStore(path: path, readOnly: true, concurrentReads: false)
        let pooled = try EventStore(path: path, readOnly: true)
        #expect(try reader.stats().events == 3)
        _ = try ingestor.ingest(path: dir.write("b.jsonl", (4...6).map { eventLine("e\($0)", ["asid": "4242"]) }))
        #expect(try reader.stats().events == 6)
        #expect(try reader.access("4242") == pooled.access("4242"))
        #expect(try reader.projectionDigests() == pooled.projectionDigests())
        #expect(try reader.projectionDigests() == writer.projectionDigests())
    }
}
