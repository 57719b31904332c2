#include <stddef.h>
#include "CMalloc.h"

// jemalloc reads this at its first allocation, before `main` (schemas/performance.md, "The allocator"):
// - narenas:2: one arena per core, as glibc's two were; its default is four per core, more memory for no
//   speed here (a 1M `ingest`: 312-318 MB against 288 MB).
// - dirty_decay_ms:1000, muzzy_decay_ms:0, background_thread:true: freed pages go back to the kernel after
//   a second, from jemalloc's own thread instead of the allocating ones (its defaults, 10 s and no thread,
//   held a 1M `ingest` at 312 MB; returning every page at once, at 206 MB, cost a fifth more CPU).
const char *malloc_conf = "narenas:2,dirty_decay_ms:1000,muzzy_decay_ms:0,background_thread:true";

int mallctl(const char *name, void *oldp, size_t *oldlenp, void *newp, size_t newlen);

unsigned idrecon_allocator_arenas(void) {
    unsigned arenas = 0;
    size_t size = sizeof(arenas);
    return mallctl("opt.narenas", &arenas, &size, NULL, 0) == 0 ? arenas : 0;
}
