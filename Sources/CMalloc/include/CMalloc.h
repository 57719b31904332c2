#ifndef IDRECON_CMALLOC_H
#define IDRECON_CMALLOC_H

/// The arenas the process's allocator (jemalloc) runs with: the settings of `malloc_conf` (CMalloc.c) in
/// effect. Calling it also keeps that file's object, and so the settings, in the executable.
unsigned idrecon_allocator_arenas(void);

#endif
