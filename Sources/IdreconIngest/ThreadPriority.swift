import Foundation

/// The CPU priority of ingestion's threads when a read API shares the process (`consume
/// --api-address`): callers wait on the API before their Graph calls, while ingestion can catch
/// up. Nice 19, not `SCHED_IDLE`: the kernel still gives ingestion a share of a busy machine,
/// so a flood of requests slows the consumer but never stops it. Measured on 2 cores with a
/// saturating `wrk` (1M-event database, a second stream consumed): GET 15.7–17.3k/s at nice
/// 10, 19.0–19.4k/s at nice 19, 20.3–20.9k/s at `SCHED_IDLE`; the consumer 2.6–5.5k, 2.8–3.0k
/// and 2.7–3.0k events/s meanwhile.
public enum ThreadPriority {
    /// Nice 19 for the calling thread only (Linux applies `setpriority(PRIO_PROCESS, 0, …)` to the
    /// calling thread, not the process). Raising a thread's nice needs no privilege; nothing
    /// lowers it again, so only threads of ingestion's own call this.
    /// `SCHED_IDLE` (linux/sched.h), which glibc's headers declare only under `_GNU_SOURCE`.
    private static let schedIdle: Int32 = 5

    public static func yieldToOthers() {
        #if os(Linux)
        _ = setpriority(__priority_which_t(PRIO_PROCESS.rawValue), 0, 19)
        var param = sched_param(sched_priority: 0)
        _ = sched_setscheduler(0, schedIdle, &param)
        #endif
    }
}
