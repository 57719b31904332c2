#ifndef CFUZZDRIVER_H
#define CFUZZDRIVER_H
#include <stddef.h>
#include <stdint.h>

/// libFuzzer's driver (LLVM 11+), present only when linked with -sanitize=fuzzer.
int LLVMFuzzerRunDriver(int *argc, char ***argv, int (*callback)(const uint8_t *data, size_t size));

#endif
