#ifndef IDRECON_CMALLOC_SHIM_H
#define IDRECON_CMALLOC_SHIM_H
// glibc's allocator settings (mallopt and its parameters), which Swift's Glibc module does not import.
#include <malloc.h>
#endif
