#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/types.h>
#include "CMalloc.h"

// jemalloc reads this at its first allocation, before `main` (schemas/performance.md, "The VM's fresh memory,
// and the allocator"):
// - narenas:2: one arena per core, as glibc's two were; its default is four per core, more memory for no
//   speed here (a 1M `ingest`: 312-318 MB against 288 MB).
// - dirty_decay_ms:1000, muzzy_decay_ms:0, background_thread:true: freed pages go back to the kernel after
//   a second, from jemalloc's own thread instead of the allocating ones (its defaults, 10 s and no thread,
//   held a 1M `ingest` at 312 MB; returning every page at once, at 206 MB, cost a fifth more CPU).
// - oversize_threshold:524288: blocks of 512 KiB and more (a build's sorted partitions, a catch-up's groups)
//   come from jemalloc's arena for large blocks, which returns them when freed, as glibc's mapped blocks were
//   (the bench's 1M `consume`: 222-230 MB against 284-312 MB with its default of 8 MiB, as fast).
const char *malloc_conf =
    "narenas:2,dirty_decay_ms:1000,muzzy_decay_ms:0,background_thread:true,oversize_threshold:524288";

int mallctl(const char *name, void *oldp, size_t *oldlenp, void *newp, size_t newlen);

unsigned idrecon_allocator_arenas(void) {
    unsigned arenas = 0;
    size_t size = sizeof(arenas);
    return mallctl("opt.narenas", &arenas, &size, NULL, 0) == 0 ? arenas : 0;
}

int idrecon_allocator_keep_large_blocks(long milliseconds) {
    // Which arena serves blocks over `oversize_threshold`: the one a block of 1 MiB comes from.
    void *probe = malloc((size_t)1 << 20);
    if (probe == NULL) return -1;
    unsigned arena = 0;
    size_t size = sizeof(arena);
    int rc = mallctl("arenas.lookup", &arena, &size, &probe, sizeof(probe));
    free(probe);
    if (rc != 0) return rc;
    unsigned automatic = idrecon_allocator_arenas();
    if (arena < automatic) return -1;  // not the oversize arena: leave the two arenas as they are
    // jemalloc purges a freed block at once when it is over its arena's oversize threshold, whatever the
    // arena's decay; with the threshold out of reach, the arena's decay decides, as in the other arenas.
    size_t threshold = (size_t)1 << 48;
    ssize_t ms = milliseconds;
    char name[64];
    snprintf(name, sizeof(name), "arena.%u.oversize_threshold", arena);
    if ((rc = mallctl(name, NULL, NULL, &threshold, sizeof(threshold))) != 0) return rc;
    snprintf(name, sizeof(name), "arena.%u.dirty_decay_ms", arena);
    return mallctl(name, NULL, NULL, &ms, sizeof(ms));
}
