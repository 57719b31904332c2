import Dispatch
import Foundation
import IdreconStore

/// Commits validated batches on a background queue so that reading and validating the
/// next batch overlaps with writing this one. Batches waiting when the writer is free
/// are appended in one transaction, up to `transactionRecords` records: the writer is
/// the bottleneck, and bigger transactions write each page they dirty once. At most
/// `depth` batches wait; a batch's memory goes once it is in the transaction. The first
/// failure stops further writes and is rethrown to the submitter.
public final class PipelinedWriter: @unchecked Sendable {
    private let store: EventStore
    private let transactionRecords: Int
    private let queue = DispatchQueue(label: "idrecon.ingest.writer")
    /// Free places for batches; a condition, not a `DispatchSemaphore`, because a writer
    /// that stops on a failure (a full disk) may be released with batches still counted,
    /// and a semaphore deallocated below its initial value traps.
    private let slots: Slots
    private let lock = NSLock()
    private var waiting: [(records: [IncomingRecord], positions: [ConsumedPosition])] = []
    private var outcome = BatchOutcome()
    private var failure: StoreError?
    private var committed: (position: Int64, records: Int64)?

    private let onCommit: (@Sendable (Int, Double) -> Void)?

    /// `onCommit` is called after each committed transaction with its records and seconds.
    public init(store: EventStore, depth: Int = 2, transactionRecords: Int, onCommit: (@Sendable (Int, Double) -> Void)? = nil) {
        self.store = store
        self.onCommit = onCommit
        self.transactionRecords = transactionRecords
        self.slots = Slots(depth)
    }

    /// Queues one batch; blocks while `depth` batches are already waiting.
    public func submit(_ records: [IncomingRecord], positions: [ConsumedPosition]) throws(IngestError) {
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
        guard lock.withLock({ failure == nil && !waiting.isEmpty }) else { return }
        var records = 0
        var last: ConsumedPosition?
        let result: Result<BatchOutcome, StoreError>
        let started = DispatchTime.now().uptimeNanoseconds
        do throws(StoreError) {
            result = .success(try store.appendBatches { [self] in
                guard records < transactionRecords, let batch = lock.withLock({ waiting.isEmpty ? nil : waiting.removeFirst() }) else { return nil }
                slots.give()
                records += batch.records.count
                last = batch.positions.first ?? last
                return batch
            })
        } catch {
            result = .failure(error)
        }
        lock.withLock {
            switch result {
            case let .success(batch):
                outcome.add(batch)
                if let last { committed = (last.position, last.records) }
                onCommit?(records, Double(DispatchTime.now().uptimeNanoseconds - started) / 1e9)
            case let .failure(error):
                failure = error
                for _ in waiting { slots.give() } // unblock the submitter, which then sees the failure
                waiting.removeAll()
            }
        }
    }

    /// The outcome of the batches committed so far, for progress.
    public var committedOutcome: BatchOutcome { lock.withLock { outcome } }

    /// The last committed position (byte offset, records), for progress.
    public var lastCommitted: (position: Int64, records: Int64)? { lock.withLock { committed } }

    /// Waits for every queued batch and returns the total outcome so far; the writer
    /// stays usable.
    public func finish() throws(IngestError) -> BatchOutcome {
        queue.sync {}
        try check()
        return lock.withLock { outcome }
    }

    private func check() throws(IngestError) {
        if let failure = lock.withLock({ failure }) { throw IngestError(failure.description) }
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
