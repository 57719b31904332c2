import Dispatch
import Foundation
import IdreconStore

/// Commits validated batches on a background queue so that reading and validating the
/// next batch overlaps with writing this one. At most `depth` batches are in flight;
/// the first failure stops further writes and is rethrown to the submitter.
public final class PipelinedWriter: @unchecked Sendable {
    private let store: EventStore
    private let queue = DispatchQueue(label: "idrecon.ingest.writer")
    private let slots: DispatchSemaphore
    private let lock = NSLock()
    private var outcome = BatchOutcome()
    private var failure: StoreError?
    private var committed: (position: Int64, records: Int64)?

    public init(store: EventStore, depth: Int = 2) {
        self.store = store
        self.slots = DispatchSemaphore(value: depth)
    }

    /// Queues one batch; blocks while `depth` batches are already in flight.
    public func submit(_ records: [IncomingRecord], positions: [ConsumedPosition]) throws(IngestError) {
        try check()
        slots.wait()
        queue.async { [self] in
            defer { slots.signal() }
            guard lock.withLock({ failure == nil }) else { return }
            let result: Result<BatchOutcome, StoreError>
            do throws(StoreError) { result = .success(try store.append(records, positions: positions)) } catch { result = .failure(error) }
            lock.withLock {
                switch result {
                case let .success(batch):
                    outcome.add(batch)
                    if let p = positions.first { committed = (p.position, p.records) }
                case let .failure(error):
                    failure = error
                }
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
