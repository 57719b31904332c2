import CSQLiteSettings
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
///
/// A lowered thread also pauses (`pause`) at least every 100 µs of its work: in its own loops
/// and, through a progress handler on every connection, inside SQLite's statements. The
/// scheduler still picks an idle-class thread now and then while normal ones wait, and on a
/// kernel that preempts only at its tick (this machine's: `preempt=none`, 250 Hz) the thread
/// then keeps the core for up to 4 ms; an event loop waiting behind it delays every request of
/// its connections by as much. `perf sched` under the busy step's `wrk` (8 s): the API's loops
/// waited 69.6 ms in 32 waits of over 1 ms, and 36.7 ms in all behind ingestion's threads
/// (its own and librdkafka's); with the pauses 23.7 ms in 15, and 11.6 ms. Six alternated pairs
/// of the busy step, GET paced at 20,000/s: p99 0.57–3.33 ms (median 2.35) against 2.67–18.4
/// (median 3.20); the consumer ingested as much; a plain `ingest` is unchanged (no thread of
/// it is lowered).
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
        idrecon_thread_mark_lowered()
        #endif
    }

    /// On a thread lowered by `yieldToOthers`, gives the core to any thread waiting for it
    /// once 100 µs have passed since the last pause (`sched_yield`: it returns at once when
    /// none waits); on any other thread, nothing. Called between the steps of lowered work.
    public static func pause() { idrecon_thread_pause_if_lowered() }

    /// The pauses that yielded on the calling thread so far (for tests).
    public static var pausesOnThisThread: UInt64 { idrecon_thread_pauses() }
}
