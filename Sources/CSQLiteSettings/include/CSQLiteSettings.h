#ifndef IDRECON_CSQLITESETTINGS_H
#define IDRECON_CSQLITESETTINGS_H
// SQLite's process-wide settings. `sqlite3_config` is variadic, which Swift does not import.

/// `sqlite3_config(SQLITE_CONFIG_MEMSTATUS, 0)`: returns SQLite's result code (SQLITE_MISUSE
/// once SQLite is initialized, that is after the process's first connection).
int idrecon_sqlite3_disable_memstatus(void);

#endif
