#ifndef IDRECON_CMALLOC_H
#define IDRECON_CMALLOC_H

/// The arenas the process's allocator (jemalloc) runs with: the settings of `malloc_conf` (CMalloc.c) in
/// effect. Calling it also keeps that file's object, and so the settings, in the executable.
unsigned idrecon_allocator_arenas(void);

/// Lets the arena of blocks of 512 KiB and more keep freed blocks for `milliseconds` (as the other
/// arenas do) instead of returning each to the kernel as it is freed. 0 when done.
int idrecon_allocator_keep_large_blocks(long milliseconds);

#endif
