import Foundation
import IdreconProjections
import Testing

/// `Relay` hands replay's friend batches from the core that reads them to the one that
/// writes them: in order, with its producer's error, and without leaving a thread blocked
/// when the caller stops early.
@Suite struct RelayTests {
    struct Failed: Error {}

    @Test func valuesArriveInOrderAndThenTheEnd() throws {
        let relay = Relay<Int> { send in for i in 0..<1_000 { try send(i) } }
        var taken: [Int] = []
        while let value = try relay.next() { taken.append(value) }
        #expect(taken == Array(0..<1_000))
        #expect(try relay.next() == nil)
    }

    @Test func aProducersErrorComesAfterWhatItSent() throws {
        let relay = Relay<Int> { send in
            try send(1)
            try send(2)
            throw Failed()
        }
        #expect(try relay.next() == 1)
        #expect(try relay.next() == 2)
        #expect(throws: Failed.self) { try relay.next() }
    }

    @Test func aCancelledProducerStopsAtItsNextSend() throws {
        let stopped = DispatchSemaphore(value: 0)
        let counter = Counter()
        let relay = Relay<Int> { send in
            defer { stopped.signal() }
            for i in 0..<1_000_000 {
                try send(i)
                counter.add()
            }
        }
        #expect(try relay.next() == 0)
        relay.cancel()
        // The producer ends (its thread is not left waiting) having sent at most two more.
        #expect(stopped.wait(timeout: .now() + 10) == .success)
        #expect(counter.value <= 3)
    }

    final class Counter: @unchecked Sendable {
        private let lock = NSLock()
        private var count = 0
        var value: Int { lock.withLock { count } }
        func add() { lock.withLock { count += 1 } }
    }
}
