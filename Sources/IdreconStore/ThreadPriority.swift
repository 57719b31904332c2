import Foundation

/// The CPU priority of work that can wait for a free core: a replay's warming of the pages its
/// swap reads, and ingestion's threads when a read API shares the process (`consume
/// --api-address`): callers wait on the API before their Graph calls, while ingestion can catch
/// up. `SCHED_IDLE`: a request that wakes preempts ingestion at once, where at nice 19 it could
/// wait out a time slice of ingestion's. The kernel still gives idle-class threads a share of a
/// busy machine, so a flood of requests slows the consumer but never stops it. Measured on 2
/// cores with a saturating `wrk` (1M-event database, a second stream consumed): GET
/// 15.7–17.3k/s at nice 10, 19.0–19.4k/s at nice 19, 20.3–20.9k/s at `SCHED_IDLE`; the
/// consumer 2.6–5.5k, 2.8–3.0k and 2.7–3.0k events/s meanwhile. Against nice 19, GET p99 while
/// consuming 4.2–5.0 → 2.7–4.2 ms and healthz p99 4.1 → 1.3–3.0 ms (README, "Ask before you call").
public enum ThreadPriority {
    /// `SCHED_IDLE` (linux/sched.h), which glibc's headers declare only under `_GNU_SOURCE`.
    private static let schedIdle: Int32 = 5

    /// `SCHED_IDLE` and nice 19 for the calling thread only (Linux applies both to the calling
    /// thread, not the process; threads it starts inherit them, as librdkafka's do). Lowering
    /// needs no privilege; nothing raises it again, so only threads of ingestion's own call this.
    public static func yieldToOthers() {
        #if os(Linux)
        _ = setpriority(__priority_which_t(PRIO_PROCESS.rawValue), 0, 19)
        var param = sched_param(sched_priority: 0)
        _ = sched_setscheduler(0, schedIdle, &param)
        #endif
    }
}
