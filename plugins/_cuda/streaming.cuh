// The launch shape of the memory-bound streaming kernels (unary and binary elementwise ops, copy_, the optimizer
// updates): each thread moves ITEMS elements or 16-byte packs, THREADS apart, so that a warp's accesses are
// contiguous and ITEMS independent loads are in flight before its first store. A config defines ITEMS and
// THREADS; these defaults stand where it does not.
#ifndef ITEMS
#define ITEMS 4
#endif
#ifndef THREADS
#define THREADS 256
#endif

// Pack<V>: V elements of T as one access
#include "pack.cuh"
