#include <sched.h>
#include <sqlite3.h>
#include <stdint.h>
#include <time.h>
#include "CSQLiteSettings.h"

int idrecon_sqlite3_disable_memstatus(void) {
    return sqlite3_config(SQLITE_CONFIG_MEMSTATUS, 0);
}

// Per thread: whether it was lowered, when it pauses next (CLOCK_MONOTONIC, ns), its pauses.
static _Thread_local int lowered;
static _Thread_local uint64_t nextPause;
static _Thread_local uint64_t pauses;

static uint64_t monotonicNanoseconds(void) {
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    return (uint64_t)now.tv_sec * 1000000000u + (uint64_t)now.tv_nsec;
}

void idrecon_thread_mark_lowered(void) { lowered = 1; }

void idrecon_thread_pause_if_lowered(void) {
    if (!lowered || monotonicNanoseconds() < nextPause) return;
    sched_yield();
    pauses += 1;
    nextPause = monotonicNanoseconds() + IDRECON_LOWERED_RUN_NANOSECONDS;
}

uint64_t idrecon_thread_pauses(void) { return pauses; }

static int pauseIfLowered(void *context) {
    (void)context;
    idrecon_thread_pause_if_lowered();
    return 0; // never interrupts the statement
}

void idrecon_sqlite3_pause_if_lowered(sqlite3 *db) {
    sqlite3_progress_handler(db, IDRECON_PROGRESS_INSTRUCTIONS, pauseIfLowered, 0);
}
