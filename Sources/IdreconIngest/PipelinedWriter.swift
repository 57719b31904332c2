import Dispatch
import Foundation
import IdreconDomain
import IdreconStore

/// Commits validated batches on a background queue so that reading and validating the
/// next batch overlaps with writing this one. Batches waiting when the writer is free
/// are appended in one transaction, up to `transactionRecords` records: the writer is
/// the bottleneck, and bigger transactions write each page they dirty once. At most
/// `depth` batches wait; a batch's memory goes once it is in the transaction. The first
/// failure stops further writes and is rethrown to the submitter.
///
/// The projections lag the log by up to one catch-up chunk (write-behind: 400,000 events,
/// `ProjectionEngine.catchUpChunk`): each entity is then read and
/// written once per many events. They are caught up when the lag is reached, `staleness`
/// after the last catch-up committed while batches keep coming, on `refresh` (a consumer
/// calls it when idle), and in `finish`; queries see them as of the last catch-up
/// (`stats`: projection_lag_events). A source that expects to at least double the log
/// (`expect(events:)`: an ingest into a new or small database, a backfill) folds nothing
/// while it appends: the projections are built anew in bulk when it is drained
/// (`EventStore.catchUpProjections(bulkFrom:)`), and queries see them as of before until then.
public final class PipelinedWriter: @unchecked Sendable {
    private let store: EventStore
    private let transactionRecords: Int
    private let queue: DispatchQueue
    /// Free places for batches; a condition, not a `DispatchSemaphore`, because a writer
    /// that stops on a failure (a full disk) may be released with batches still counted,
    /// and a semaphore deallocated below its initial value traps.
    private let slots: Slots
    private let lock = NSLock()
    private var waiting: [(records: [IncomingRecord], positions: [ConsumedPosition])] = []
    private var outcome = BatchOutcome()
    private var failure: IdreconError?
    private var committed: (position: Int64, records: Int64)?

    private let onCommit: (@Sendable (Int, Double) -> Void)?
    private let yielding: Bool
    private let staleness: Double
    private let bulkFrom: Int64?
    private let onBuild: (@Sendable (Int64, Int64) -> Void)?
    /// Whether folds wait for a bulk build (`expect(events:)`), and the events the source
    /// last said were still to come (both touched on the writer's queue only).
    private var deferring = false
    private var backlog: Int64 = 0
    private var caughtUpAt = DispatchTime.now().uptimeNanoseconds
    /// Whether the projections may be behind the log (touched on the writer's queue only):
    /// at first they may, since a writer killed before its catch-up (or its bulk build) left
    /// them so, and a run that appends nothing must still bring them up.
    private var behind = true
    /// The WAL's checkpoints, beside the writer while this pipeline lives.
    private let checkpoints: BackgroundCheckpoints?

    /// `onCommit` is called after each committed transaction with its records and seconds.
    /// `yielding`: the writer runs at the lowest CPU priority (see `ThreadPriority`).
    /// `bulkFrom`: events behind from which a bulk build is considered (nil: never);
    /// `onBuild` is called with its progress (events built, of the log's).
    public init(
        store: EventStore, depth: Int = 2, transactionRecords: Int, staleness: Double = 10, yielding: Bool = false,
        bulkFrom: Int64? = EventStore.bulkCatchUpFrom, onCommit: (@Sendable (Int, Double) -> Void)? = nil,
        onBuild: (@Sendable (Int64, Int64) -> Void)? = nil
    ) {
        self.store = store
        self.bulkFrom = bulkFrom
        self.onBuild = onBuild
        self.yielding = yielding
        queue = DispatchQueue(label: "idrecon.ingest.writer", qos: yielding ? .background : .unspecified)
        self.onCommit = onCommit
        self.transactionRecords = transactionRecords
        self.staleness = staleness
        self.slots = Slots(depth)
        if yielding {
            checkpoints = store.checkpointInBackground(lowered: { ThreadPriority.yieldToOthers() })
        } else {
            checkpoints = store.checkpointInBackground()
        }
    }

    deinit { checkpoints?.stop() }

    /// Tells the writer how many more events its source expects to append (a file: its
    /// estimate, before the first batch; a consumer: its backlog, with each batch). When
    /// that makes the projections due a bulk build, nothing is folded while appending: they
    /// are built once the source says it has caught up (less than a transaction to come),
    /// when it is idle (`refresh`), or in `finish`.
    public func expect(events: Int64) {
        queue.async { [self] in
            backlog = events
            guard let bulkFrom, !deferring, lock.withLock({ failure == nil }) else { return }
            do throws(IdreconError) {
                deferring = try store.bulkBuildDue(from: bulkFrom, expecting: events)
            } catch {
                stop(error)
            }
        }
    }

    /// Queues one batch; blocks while `depth` batches are already waiting.
    public func submit(_ records: [IncomingRecord], positions: [ConsumedPosition]) throws(IdreconError) {
        try check()
        slots.take()
        let queued = lock.withLock { () -> Bool in
            guard failure == nil else { return false }
            waiting.append((records, positions))
            return true
        }
        guard queued else {
            slots.give()
            try check()
            return
        }
        queue.async { [self] in writeWaiting() }
    }

    /// Appends what is waiting (nothing if an earlier call took it) in one transaction.
    private func writeWaiting() {
        // The background QoS gives the writer GCD threads of their own (at nice 10), so the
        // priority lowered here touches no other work of the process.
        if yielding { ThreadPriority.yieldToOthers() }
        guard lock.withLock({ failure == nil && !waiting.isEmpty }) else { return }
        var records = 0
        var last: ConsumedPosition?
        let started = DispatchTime.now().uptimeNanoseconds
        // Projections that have lagged for `staleness` are folded in this same transaction.
        let stale = !deferring && secondsSinceCaughtUp >= staleness
        let batch: BatchOutcome, projected: Int64
        do throws(IdreconError) {
            (batch, projected) = try store.appendBatches(projectionLag: deferring ? .max : stale ? 0 : nil) { [self] in
                guard records < transactionRecords, let batch = lock.withLock({ waiting.isEmpty ? nil : waiting.removeFirst() }) else { return nil }
                slots.give()
                records += batch.records.count
                last = batch.positions.first ?? last
                return batch
            }
        } catch {
            stop(error)
            return
        }
        // Staleness counts from the commit of the last catch-up of either kind: after one
        // triggered by the lag, a timer still counting from the one before would fold a
        // second, small chunk, and every chunk rewrites pages all over the projection tables.
        // Counting from the catch-up's start instead left less appending time before the
        // next one the longer catch-ups took, so chunks shrank as the tables grew.
        // A catch-up folds everything pending; none, or one deferred to a bulk build, leaves
        // the projections behind.
        if projected > 0 || stale { caughtUpAt = DispatchTime.now().uptimeNanoseconds }
        behind = projected == 0
        lock.withLock {
            outcome.add(batch)
            if let last { committed = (last.position, last.records) }
            onCommit?(records, Double(DispatchTime.now().uptimeNanoseconds - started) / 1e9)
        }
        if deferring, backlog < transactionRecords { catchUp() }
    }

    /// Stops further writes after a failure; the submitter, unblocked, then sees it.
    private func stop(_ error: IdreconError) {
        lock.withLock {
            failure = error
            for _ in waiting { slots.give() }
            waiting.removeAll()
        }
    }

    /// The outcome of the batches committed so far, for progress.
    public var committedOutcome: BatchOutcome { lock.withLock { outcome } }

    /// The last committed position (byte offset, records), for progress.
    public var lastCommitted: (position: Int64, records: Int64)? { lock.withLock { committed } }

    /// Catches the projections up when nothing waits: a consumer calls this when no record
    /// arrived for a while.
    public func refresh() {
        queue.async { [self] in
            if lock.withLock({ waiting.isEmpty }) { catchUp() }
        }
    }

    private var secondsSinceCaughtUp: Double { Double(DispatchTime.now().uptimeNanoseconds - caughtUpAt) / 1e9 }

    /// Brings the projections up to the log (on the writer's queue); a failure stops the
    /// writer as a failed append does.
    private func catchUp() {
        guard behind, lock.withLock({ failure == nil }) else { return }
        do throws(IdreconError) {
            let catchUp = { [store, bulkFrom, onBuild] () throws(IdreconError) in
                try store.catchUpProjections(bulkFrom: bulkFrom) { onBuild?($0, $1) }
            }
            if let checkpoints { _ = try checkpoints.pausing(catchUp) } else { _ = try catchUp() }
            deferring = false
            caughtUpAt = DispatchTime.now().uptimeNanoseconds
            behind = false
        } catch {
            stop(error)
        }
    }

    /// Waits for every queued batch, brings the projections up to the log and returns the
    /// total outcome so far; the writer stays usable.
    public func finish() throws(IdreconError) -> BatchOutcome {
        queue.sync { catchUp() }
        try check()
        return lock.withLock { outcome }
    }

    private func check() throws(IdreconError) {
        if let failure = lock.withLock({ failure }) { throw failure }
    }
}

/// A counting limit on queued batches.
private final class Slots: @unchecked Sendable {
    private let condition = NSCondition()
    private var free: Int

    init(_ count: Int) { free = count }

    func take() {
        condition.lock()
        while free == 0 { condition.wait() }
        free -= 1
        condition.unlock()
    }

    func give() {
        condition.lock()
        free += 1
        condition.signal()
        condition.unlock()
    }
}
