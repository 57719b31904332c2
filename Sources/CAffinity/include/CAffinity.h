#ifndef IDRECON_CAFFINITY_H
#define IDRECON_CAFFINITY_H
// The CPUs this process may run on, and pinning the calling thread to one: glibc declares its
// affinity calls and `cpu_set_t`'s macros only under `_GNU_SOURCE`, which Swift's Glibc module is not
// built with.

// Writes up to `capacity` CPU numbers this process may run on, ascending; returns how many, or -1.
int idrecon_allowed_cpus(int *cpus, int capacity);

// Lets the calling thread run on `cpu` only; 0, or -1 with errno set.
int idrecon_pin_calling_thread(int cpu);
#endif
