#ifndef IDRECON_CPREFETCH_SHIM_H
#define IDRECON_CPREFETCH_SHIM_H
// The compiler's prefetch hint, which Swift does not expose: a bulk fold asks for the texts
// of entries it will read next, which lie all over a partition's buffer.
static inline void idrecon_prefetch(const void *address) { __builtin_prefetch(address); }
#endif
