// When an OpenMP kernel opens a parallel region: below these sizes one thread does the work.
// A region costs a few microseconds with idle cores. On a loaded machine a region waits for
// every thread of its team, and a descheduled one costs a scheduler slice: one small
// linear_backward took 41 ms in 2 threads on 2 busy cores, against 0.2 ms in one.
#ifndef KZ_OPENMP_PARALLEL_H
#define KZ_OPENMP_PARALLEL_H
#define PARALLEL_MIN 32768             // elements of a cheap loop (adds, compares, copies): ~10 us on one core
#define PARALLEL_MIN_CALLS 8192        // elements that each call libm (erff, expf, tanhf, ...): ~0.1 ms
#define GEMM_PARALLEL_MIN (1LL << 20)  // multiply-adds of a GEMM: ~30 us on one core
#endif
