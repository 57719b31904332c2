#if canImport(CAffinity)
import CAffinity
#endif
import NIOPosix

/// The read API's event loops, one to a core. Unpinned, the scheduler at times ran both loops on one
/// core, each waiting out the other's time slice, while the other core ran the callers' threads: on
/// this 2-core VM, with `wrk` beside the API and a consumer ingesting (the bench's busy step), six
/// alternated pairs gave a `wrk` p99 of 2.78, 4.21, 1.80, 3.61, 1.97 and 3.00 ms unpinned against 1.10,
/// 1.47, 1.51, 1.29, 1.38 and 0.75 ms pinned, paced at 20,000/s a median 4.4 against 2.7 ms, at 7 %
/// fewer requests/s under `wrk` (`schemas/performance.md`, "The read API's event loops, one to a core").
/// Only when the process may run on as many CPUs as there are loops: fewer would put two on one core.
enum EventLoopAffinity {
    /// Pins the i-th loop of NIO's shared group (Hummingbird's) to the i-th CPU the process may run on.
    /// Asked again, it pins them again to the same CPUs.
    static func pinSharedLoops() {
        #if canImport(CAffinity)
        let loops = Array(MultiThreadedEventLoopGroup.singleton.makeIterator())
        var cpus = [Int32](repeating: 0, count: 1024)
        let count = Int(idrecon_allowed_cpus(&cpus, Int32(cpus.count)))
        guard loops.count > 1, count >= loops.count else { return }
        for (loop, cpu) in zip(loops, cpus) {
            // A failure leaves the loop where the scheduler puts it, as before: nothing to report.
            loop.execute { _ = idrecon_pin_calling_thread(cpu) }
        }
        #endif
    }
}
