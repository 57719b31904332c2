import Dispatch
import GRDB
import IdreconDomain
import Synchronization

/// A batch of `access` lookups (`POST /v1/access`, up to 10,000 ASIDs) read on two cores from one
/// state of the database. The batch, in key order, is cut into chunks: the calling thread answers
/// them from the low end on one connection, a thread of this reader's own from the high end on
/// another, until they meet. Each connection so reads mostly its end of every table's pages, which
/// its page cache then holds, and a helper that is slow to start (its core busy) only leaves the
/// caller more chunks: the caller never waits for more than the one chunk the helper is reading.
///
/// Both connections must read one state, or the answers and the position they report could
/// disagree. Debian's SQLite is built without the snapshot API (`sqlite3_snapshot_open`), so the
/// helper's connection brackets the caller's: it reads `PRAGMA data_version` before the caller's
/// transaction takes its snapshot and again as the first statement of its own transaction. The
/// pragma changes whenever another connection has committed in between, so the same value twice
/// means no commit came between the two snapshots: they are one state. When it changed (a commit
/// in those microseconds, or a checkpoint), the caller answers the whole batch alone.
final class SplitReader: Sendable {
    /// Below this many ASIDs a batch is read on one connection: handing chunks to another thread
    /// costs more than they do.
    static let minimumBatch = 128
    /// ASIDs per chunk: about half a millisecond of lookups.
    static let chunk = 64

    private let lower: PinnedReader
    /// Left inside a read transaction between the call that begins it (on the caller's thread)
    /// and the one that ends it (on the helper's, or the caller's when the helper never started).
    private let upper: DatabaseQueue
    private let helper: DispatchQueue
    /// Runs between the two snapshots (tests commit there).
    private let betweenSnapshots: (@Sendable () -> Void)?

    init(path: String, betweenSnapshots: (@Sendable () -> Void)? = nil) throws(IdreconError) {
        self.betweenSnapshots = betweenSnapshots
        // About half of the key space each: half the cache of a connection that reads all of it.
        let cacheKiB = EventStore.pageCacheKiB / 2
        lower = try PinnedReader(path: path, cacheKiB: cacheKiB)
        var config = PinnedReader.configuration(cacheKiB: cacheKiB)
        config.allowsUnsafeTransactions = true
        do {
            upper = try DatabaseQueue(path: path, configuration: config)
        } catch {
            throw IdreconError(.storage, "cannot open database \(path): \(IdreconError.describe(error))")
        }
        helper = DispatchQueue(label: "idrecon.split-reader", qos: .userInitiated)
    }

    /// `EventStore.access(_:asOf:)`, its chunks on two threads.
    func access(
        _ asids: [String], asOf: Int64?
    ) throws(IdreconError) -> (answers: [AccessAnswer], lastSeq: Int64, appliedSeq: Int64) {
        let order = EventStore.keyOrder(asids)
        // `BEGIN DEFERRED` takes no snapshot: the lower connection's is taken by its first read
        // (`sequences`), after the upper one has read `before`.
        return try lower.read { db in
            let before = try upper.inDatabase { try Self.dataVersion($0) }
            let (last, applied) = try EventStore.sequences(db)
            var answers = [AccessAnswer](repeating: AccessAnswer(asid: "", state: .unseen), count: asids.count)
            let lookup = try EventStore.AccessLookup(db)
            let shared = Shared(chunks: (order.count + Self.chunk - 1) / Self.chunk)
            betweenSnapshots?()
            let helped = try beginUpper(sameAs: before)
            if helped {
                helper.async { [upper, asids, order] in Self.help(shared, upper, asids, order, asOf: asOf) }
            }
            var failure: (any Error)?
            while failure == nil, let chunk = shared.takeLow() {
                do {
                    for i in Self.keys(chunk, of: order) { answers[i] = try lookup.answer(asids[i], asOf: asOf) }
                } catch { failure = error }
            }
            // The helper's transaction ends whoever has it: the helper, or this thread if it never started.
            if helped, shared.cancelHelper() {
                Self.end(upper)
            } else if helped {
                let (answered, helperFailure) = shared.waitForHelper()
                for (i, answer) in answered { answers[i] = answer }
                failure = failure ?? helperFailure
            }
            if let failure { throw failure }
            return (answers, last, applied)
        }
    }

    /// Begins the upper connection's read transaction; true when it reads the state whose
    /// `data_version` was `before` (otherwise it is ended again).
    private func beginUpper(sameAs before: Int64) throws -> Bool {
        try upper.inDatabase { db in
            try BulkStatement(cached: db, "BEGIN DEFERRED").run { _ in }
            do {
                if try Self.dataVersion(db) == before { return true }
                try BulkStatement(cached: db, "ROLLBACK").run { _ in }
                return false
            } catch {
                _ = try? BulkStatement(cached: db, "ROLLBACK").run { _ in }
                throw error
            }
        }
    }

    /// The helper: answers chunks from the high end on `upper`, inside the transaction
    /// `beginUpper` opened, then ends it.
    private static func help(
        _ shared: Shared, _ upper: DatabaseQueue, _ asids: [String], _ order: [Int], asOf: Int64?
    ) {
        guard shared.startHelper() else { return }
        var answers: [(Int, AccessAnswer)] = []
        var failure: (any Error)?
        do {
            try upper.inDatabase { db in
                let lookup = try EventStore.AccessLookup(db)
                while let chunk = shared.takeHigh() {
                    for i in keys(chunk, of: order) { answers.append((i, try lookup.answer(asids[i], asOf: asOf))) }
                }
            }
        } catch { failure = error }
        end(upper)
        shared.finishHelper(answers, failure)
    }

    private static func keys(_ chunk: Int, of order: [Int]) -> ArraySlice<Int> {
        order[chunk * Self.chunk..<min(order.count, (chunk + 1) * Self.chunk)]
    }

    private static func end(_ upper: DatabaseQueue) {
        _ = try? upper.inDatabase { db in try BulkStatement(cached: db, "COMMIT").run { _ in } }
    }

    private static func dataVersion(_ db: Database) throws -> Int64 {
        try BulkStatement(cached: db, "PRAGMA data_version").first({ _ in }, { $0.int(0) }) ?? -1
    }

    /// The chunks not yet taken (`low..<high`), and the helper's part: whether it started or was
    /// called off, and what it answered.
    private final class Shared: Sendable {
        private struct State {
            var low = 0, high: Int
            var helper = Helper.pending
            var answers: [(Int, AccessAnswer)] = []
            var failure: (any Error)?
        }

        private enum Helper { case pending, started, cancelled }

        private let state: Mutex<State>
        private let done = DispatchSemaphore(value: 0)

        init(chunks: Int) { state = Mutex(State(high: chunks)) }

        func takeLow() -> Int? {
            state.withLock { s in
                guard s.low < s.high else { return nil }
                defer { s.low += 1 }
                return s.low
            }
        }

        func takeHigh() -> Int? {
            state.withLock { s in
                guard s.low < s.high else { return nil }
                s.high -= 1
                return s.high
            }
        }

        /// True when the helper may start (the caller has not called it off).
        func startHelper() -> Bool {
            state.withLock { s in
                guard s.helper == .pending else { return false }
                s.helper = .started
                return true
            }
        }

        /// True when the helper had not started and now never will.
        func cancelHelper() -> Bool {
            state.withLock { s in
                guard s.helper == .pending else { return false }
                s.helper = .cancelled
                return true
            }
        }

        func finishHelper(_ answers: [(Int, AccessAnswer)], _ failure: (any Error)?) {
            state.withLock { s in
                s.answers = answers
                s.failure = failure
            }
            done.signal()
        }

        func waitForHelper() -> (answers: [(Int, AccessAnswer)], failure: (any Error)?) {
            done.wait()
            return state.withLock { s in (s.answers, s.failure) }
        }
    }

    /// The pair of connections a store lends its batches, opened when first needed. Only a batch
    /// read while no other is gets it: batches read side by side already use both cores, and
    /// splitting them too cost throughput (8 connections asking 1,000 ASIDs each: 162-175
    /// batches/s split against 193-234/s not).
    final class Pool: Sendable {
        private struct State {
            var pair: SplitReader?
            var opened = false
            var batches = 0
        }

        private let state = Mutex(State())

        /// Runs `body` with the pair when the batch, of `count` ASIDs, is worth splitting
        /// (`minimumBatch`) and no other batch is being read; otherwise with nil.
        func lend<T, E: Error>(
            _ path: String, batch count: Int, _ body: (SplitReader?) throws(E) -> T
        ) throws(E) -> T {
            guard count >= SplitReader.minimumBatch else { return try body(nil) }
            let reader = enter(path)
            defer { leave() }
            return try body(reader)
        }

        /// Counts a batch in, and lends it the pair if it is the only one (opening the pair
        /// the first time; a pair that cannot be opened is not tried again).
        private func enter(_ path: String) -> SplitReader? {
            let (pair, open) = state.withLock { state -> (SplitReader?, Bool) in
                state.batches += 1
                guard state.batches == 1 else { return (nil, false) }
                defer { state.opened = true }
                return (state.pair, !state.opened)
            }
            guard open else { return pair }
            let opened = try? SplitReader(path: path)
            state.withLock { $0.pair = opened }
            return opened
        }

        /// Counts a batch out.
        private func leave() { state.withLock { $0.batches -= 1 } }
    }
}
