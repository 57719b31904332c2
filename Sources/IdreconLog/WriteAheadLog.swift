import GRDB
import GRDBSQLite

/// Resetting the write-ahead log when a writer is done with the database.
package enum WriteAheadLog {
    /// Checkpoints the WAL into the database and truncates it, unless a reader is using it: a
    /// WAL left behind (1.28 GB after a 10M replay) made every later reader look each page up
    /// in its index first, and an audit of 1M calls over that database took 18.0 s against
    /// 13.2–13.9 s once it was reset. SQLite deletes the WAL itself only when the last
    /// connection to close can write, and a pool's last one may be a reader. Waits at most
    /// `waitMilliseconds` for readers of other processes; a reset refused is left for the next
    /// writer, which resets the WAL once it is checkpointed anyway.
    package static func reset(_ db: Database, waitMilliseconds: Int32 = 100) {
        // The connection is being closed: its own busy handler (30 s) is not needed any more.
        sqlite3_busy_timeout(db.sqliteConnection, waitMilliseconds)
        sqlite3_wal_checkpoint_v2(db.sqliteConnection, nil, SQLITE_CHECKPOINT_TRUNCATE, nil, nil)
    }
}
