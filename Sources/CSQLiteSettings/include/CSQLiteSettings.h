#ifndef IDRECON_CSQLITESETTINGS_H
#define IDRECON_CSQLITESETTINGS_H
// SQLite's process-wide settings (`sqlite3_config` is variadic, which Swift does not import),
// and the pauses of lowered threads, inside SQLite's work too (`ThreadPriority`).

#include <stdint.h>

typedef struct sqlite3 sqlite3;

/// `sqlite3_config(SQLITE_CONFIG_MEMSTATUS, 0)`: returns SQLite's result code (SQLITE_MISUSE
/// once SQLite is initialized, that is after the process's first connection).
int idrecon_sqlite3_disable_memstatus(void);

/// The longest a lowered thread runs between two pauses, and how many of SQLite's virtual
/// machine instructions a statement runs between two looks at the clock (far less work than the
/// longest run: the handler itself is a thread-local load on threads that were not lowered).
#define IDRECON_LOWERED_RUN_NANOSECONDS 100000u
#define IDRECON_PROGRESS_INSTRUCTIONS 1000

/// Marks the calling thread as lowered (it runs at `SCHED_IDLE`): its pauses yield the core.
void idrecon_thread_mark_lowered(void);

/// On a lowered thread, `sched_yield` once `IDRECON_LOWERED_RUN_NANOSECONDS` have passed since
/// its last pause; on any other thread, nothing (one thread-local load).
void idrecon_thread_pause_if_lowered(void);

/// The pauses that yielded on the calling thread so far.
uint64_t idrecon_thread_pauses(void);

/// Installs `idrecon_thread_pause_if_lowered` as the connection's progress handler, so that a
/// lowered thread pauses inside long statements as well.
void idrecon_sqlite3_pause_if_lowered(sqlite3 *db);

#endif
