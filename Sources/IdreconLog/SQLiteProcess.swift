import CSQLiteSettings

/// SQLite's settings for the whole process, applied before its first connection opens.
package enum SQLiteProcess {
    /// Applies the settings once; later calls do nothing. SQLite takes them only before it is
    /// initialized, so every connection's configuration calls this first (`EventStore`).
    ///
    /// Memory statistics off (`SQLITE_CONFIG_MEMSTATUS`). With them on, every allocation and
    /// free of every connection takes one process-wide mutex to count bytes. In `consume
    /// --api-address` the writer runs at `SCHED_IDLE`: preempted while it holds that mutex,
    /// it left the API's event loops asleep on it until the kernel ran the idle thread again
    /// (`perf` of the loops' context switches under a GET flood while consuming: 1,430 waits
    /// in 4 s in `sqlite3Malloc`/`sqlite3_free`, up to milliseconds each). idrecon reads none of
    /// the statistics and sets no soft heap limit, which needs them. The result is not checked:
    /// after another library's connection it is `SQLITE_MISUSE`, and the statistics stay on.
    package static func configure() { _ = applied }

    private static let applied: Int32 = idrecon_sqlite3_disable_memstatus()
}
