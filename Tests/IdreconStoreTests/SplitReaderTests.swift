import Foundation
import IdreconDomain
import IdreconIngest
import Synchronization
@testable import IdreconStore
import Testing

/// A batch read on two connections (`SplitReader`) answers as one connection does, from one
/// state of the database.
@Suite struct SplitReaderTests {
    /// Every ASID of generated streams (and some never seen), many times over and shuffled,
    /// at many times: the split batch equals the ASIDs asked one by one, in request order.
    @Test func splitBatchesAnswerLikeOneConnection() throws {
        for seed: UInt64 in [3, 17] {
            let dir = TempDir()
            let store = try EventStore(path: dir.path("db.sqlite"))
            try ingest(generatedLines(seed: seed, events: 400), into: store, dir: dir, batchSize: 50)
            let seen = try store.read { db in
                try String.fetchAll(db, sql: "SELECT asid FROM asids UNION SELECT asid FROM friend_mentions")
            }
            var rng = SeededGenerator(seed: seed)
            let copies = 3 * SplitReader.minimumBatch / max(1, seen.count) + 1
            let asids = (Array(repeating: seen, count: copies).joined() + ["9", String(repeating: "9", count: 32)])
                .shuffled(using: &rng)
            #expect(asids.count >= SplitReader.minimumBatch * 3)
            let reader = try SplitReader(path: store.path)
            let position = try store.logPosition()
            for asOf in [nil] + (1...8).map({ Int64($0) * 3_600_000 * 24 * 3 + 1_700_000_000_000 }) {
                let expected = try asids.map { try store.access($0, asOf: asOf) }
                for read in [try reader.access(asids, asOf: asOf), try store.access(asids, asOf: asOf)] {
                    #expect(read.answers == expected, "seed \(seed), as of \(asOf.map(Timestamp.format) ?? "now")")
                    #expect(read.lastSeq == position.lastSeq && read.appliedSeq == position.appliedSeq)
                }
            }
        }
    }

    /// A commit that lands after the first connection's snapshot and before the second's is
    /// seen by neither half: the whole batch is the state before it, with its position.
    @Test func aCommitBetweenTheSnapshotsIsSeenByNoAnswer() throws {
        var s = try Stream()
        let asids = (0..<300).map { String(1_000 + $0) }
        try s.ingest(asids.map { Stream.login("c\($0)", day: 1, device: "D\($0)", asid: $0) }, batchSize: 100)
        let limited = asids.map { Stream.login("l\($0)", day: 2, device: "D\($0)", asid: $0, limited: true) }
        let (file, store) = (s.dir.write("limited.jsonl", limited), s.store)
        let committed = Mutex(false)
        let reader = try SplitReader(path: store.path) {
            guard committed.withLock({ done in defer { done = true }; return !done }) else { return }
            _ = try! FileIngestor(store: store, batchSize: 1_000).ingest(path: file)
        }
        let before = try store.logPosition()
        let first = try reader.access(asids, asOf: nil)
        #expect(first.answers.filter { $0.state != .allowed }.count == 0, "answers of the state after the commit")
        #expect(first.appliedSeq == before.appliedSeq)
        let second = try reader.access(asids, asOf: nil)
        #expect(second.answers.filter { $0.state != .forbiddenLimited }.count == 0)
        #expect(second.appliedSeq > before.appliedSeq)
    }

    /// Batches asked from many threads at once, while a writer commits: each answers as a
    /// single connection would, and every batch's answers are one state (all of a batch's
    /// ASIDs change together here).
    @Test func concurrentBatchesUnderAWriterAreEachOneState() async throws {
        var s = try Stream()
        let asids = (0..<400).map { String(5_000 + $0) }
        try s.ingest(asids.map { Stream.login("c\($0)", day: 1, device: "D\($0)", asid: $0) }, batchSize: 400)
        let store = s.store
        let rounds = (1...6).map { round in
            s.dir.write("round\(round).jsonl", asids.map {
                Stream.login("r\(round)-\($0)", day: 1 + Double(round), device: "D\($0)", asid: $0,
                             limited: round % 2 == 1)
            })
        }
        let writer = Task.detached {
            for file in rounds {
                var ingestor = FileIngestor(store: store, batchSize: 1_000)
                ingestor.bulkFrom = nil // a round is one transaction, its projections folded in it
                _ = try ingestor.ingest(path: file)
            }
        }
        try await withThrowingTaskGroup(of: Void.self) { group in
            for _ in 0..<3 {
                group.addTask {
                    for _ in 0..<20 {
                        let read = try store.access(asids, asOf: nil)
                        #expect(Set(read.answers.map(\.state)).count == 1, "a batch read two states")
                    }
                }
            }
            try await group.waitForAll()
        }
        try await writer.value
    }
}
