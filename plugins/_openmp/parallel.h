// When an OpenMP kernel opens a parallel region: below these sizes one thread does the work.
// A region costs a few microseconds with idle cores. On a loaded machine a region waits for
// every thread of its team, and a descheduled one costs a scheduler slice, which can make a small
// call two orders of magnitude slower on two threads than on one (docs/design/elementwise.md).
#ifndef KZ_OPENMP_PARALLEL_H
#define KZ_OPENMP_PARALLEL_H
// The thresholds: sizes at which one thread's work, a call through Python included, takes some tens of
// microseconds, well above a region's cost.
#define PARALLEL_MIN 32768             // elements of a cheap loop (adds, compares, copies)
#define PARALLEL_MIN_CALLS 8192        // elements that each call libm (erff, expf, tanhf, ...)
#define GEMM_PARALLEL_MIN (1LL << 20)  // multiply-adds of a GEMM
#endif
