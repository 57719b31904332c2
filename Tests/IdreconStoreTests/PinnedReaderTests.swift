import Foundation
import IdreconDomain
@testable import IdreconStore
import Testing

/// The read transaction an event loop's reader holds for one turn (`PinnedReader.readHeld`).
@Suite struct PinnedReaderTests {
    @Test func aHeldTransactionIsOneSnapshotUntilReleased() throws {
        var s = try Stream()
        try s.ingest([Stream.login("e1", day: 1, device: "D", asid: "11")])
        let reader = try s.store.pinnedReader()

        let first = try reader.accessHeld(["11", "22"], asOf: nil)
        #expect(first.began)
        #expect(first.value.answers.map(\.state) == [.allowed, .unseen])

        // A writer commits while the transaction is held: the reads of the same turn do not see it,
        // and do not begin another transaction.
        try s.ingest([Stream.login("e2", day: 2, device: "E", asid: "22", limited: true)])
        let second = try reader.accessHeld(["22"], asOf: nil)
        #expect(!second.began)
        #expect(second.value.answers.map(\.state) == [.unseen])
        #expect(second.value.lastSeq == first.value.lastSeq)

        // Released, the next read begins a transaction and sees the commit.
        reader.release()
        let third = try reader.accessHeld(["22"], asOf: nil)
        #expect(third.began)
        #expect(third.value.answers.map(\.state) == [.forbiddenLimited])
        #expect(third.value.lastSeq > first.value.lastSeq)
        reader.release()
        reader.release() // a second release finds nothing open
        #expect(try reader.accessHeld(["11"], asOf: nil).began)
        reader.release()
    }

    @Test func aHeldTransactionDoesNotHoldTheWriterBack() throws {
        var s = try Stream()
        try s.ingest([Stream.login("e1", day: 1, device: "D", asid: "11")])
        let reader = try s.store.pinnedReader()
        _ = try reader.accessHeld(["11"], asOf: nil)
        // WAL mode: a reader's snapshot never blocks a writer's commit.
        try s.ingest((2...40).map { Stream.login("e\($0)", day: Double($0), device: "D\($0)", asid: "\($0)") })
        reader.release()
        #expect(try reader.accessHeld(["40"], asOf: nil).value.answers[0].state == .allowed)
        reader.release()
    }
}
