import Foundation
import GRDB
@testable import IdreconStore
import Testing

/// A lowered thread pauses inside SQLite's statements too (the progress handler every connection of
/// the store gets); a thread that was not lowered never does.
@Suite struct ThreadPriorityTests {
    @Test func aLoweredThreadPausesInsideALongStatementAndNoOtherDoes() throws {
        let dir = TempDir()
        let store = try EventStore(path: dir.path("db.sqlite"))
        let reader = try EventStore(path: dir.path("db.sqlite"), readOnly: true, concurrentReads: false)
        #expect(try onThreadOfItsOwn(lowered: false) { try count(reader) } == 0)
        #expect(try onThreadOfItsOwn(lowered: true) { try count(reader) } > 0)
        #expect(try onThreadOfItsOwn(lowered: true) { try count(store) } > 0)
    }

    /// Runs a statement of some milliseconds through `store` on the calling thread; returns the pauses it made.
    private func count(_ store: EventStore) throws -> UInt64 {
        let before = ThreadPriority.pausesOnThisThread
        let rows = try store.read { db in
            try Int.fetchOne(db, sql: """
                WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < 300000)
                SELECT count(*) FROM c
                """)
        }
        #expect(rows == 300_000)
        return ThreadPriority.pausesOnThisThread - before
    }

    /// `body` on a new thread, lowered first when asked (the lowering ends with the thread).
    private func onThreadOfItsOwn(lowered: Bool, _ body: @escaping @Sendable () throws -> UInt64) throws -> UInt64 {
        final class Outcome: @unchecked Sendable { var result: Result<UInt64, any Error>? }
        let outcome = Outcome()
        let done = DispatchSemaphore(value: 0)
        let thread = Thread {
            if lowered { ThreadPriority.yieldToOthers() }
            outcome.result = Result { try body() }
            done.signal()
        }
        thread.start()
        done.wait()
        return try outcome.result!.get()
    }
}
