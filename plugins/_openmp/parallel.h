// When an OpenMP kernel opens a parallel region: below these sizes one thread does the work.
// A region costs a few microseconds with idle cores. On a loaded machine a region waits for
// every thread of its team, and a descheduled one costs a scheduler slice: one small
// linear_backward took 41 ms in 2 threads on 2 busy cores, against 0.2 ms in one.
#ifndef KZ_OPENMP_PARALLEL_H
#define KZ_OPENMP_PARALLEL_H
// One thread of a 2-core AMD EPYC (2026-11-22, plugin runs through Python included) took 12 us for a
// relu and 24 us for an add of PARALLEL_MIN elements, 38 us for exp and 68 us for gelu of
// PARALLEL_MIN_CALLS, and 41 us for a linear of GEMM_PARALLEL_MIN multiply-adds (64x128x128).
#define PARALLEL_MIN 32768             // elements of a cheap loop (adds, compares, copies)
#define PARALLEL_MIN_CALLS 8192        // elements that each call libm (erff, expf, tanhf, ...)
#define GEMM_PARALLEL_MIN (1LL << 20)  // multiply-adds of a GEMM
#endif
