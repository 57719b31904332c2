#include <stddef.h>
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
