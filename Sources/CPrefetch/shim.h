#ifndef IDRECON_CPREFETCH_SHIM_H
#define IDRECON_CPREFETCH_SHIM_H
#include <stdint.h>
// The compiler's prefetch hint, which Swift does not expose: a bulk fold asks for the texts
// of entries it will read next, which lie all over a partition's buffer.
static inline void idrecon_prefetch(const void *address) { __builtin_prefetch(address); }

// How many of `count` keys (each two words, high first, ascending) from `keys` on are below
// (`high`, `low`): a binary search whose steps are conditional moves, not branches. Swift's
// compiler made its `?:` a branch, and the replay's lookups of partitions went either way at
// random.
static inline intptr_t idrecon_count_below(const uint64_t *keys, intptr_t count, uint64_t high, uint64_t low) {
    if (count <= 0) return 0;
    intptr_t base = 0;
    while (count > 1) {
        intptr_t half = count / 2;
        const uint64_t *k = keys + 2 * (base + half);
        _Bool below = (k[0] < high) | ((k[0] == high) & (k[1] < low));
        base = __builtin_unpredictable(below) ? base + half : base;
        count -= half;
    }
    const uint64_t *k = keys + 2 * base;
    return base + ((k[0] < high) | ((k[0] == high) & (k[1] < low)));
}
#endif
