// The one OpenMP loop of the unary elementwise ops: y[i] = UNARY(x[i], a) over a contiguous
// float array, a being the op's scalar parameter (pow's exponent; the others ignore it). Each
// op's openmp.c defines UNARY and includes this file, so each op builds its own library with
// its expression inlined into the loop.
//
// glibc's logf / powf (under 1 ulp) run one element at a time (exp and tanh use vector_math.h's instead): gcc vectorises
// such calls only through libmvec's 4-ulp variants, declared under -ffast-math alone, which
// would also break NaN and inf.
#include "../_openmp/parallel.h"
#include <math.h>

#ifndef UNARY
#error "define UNARY(x, a) before including unary_openmp.h"
#endif

void unary(const float *restrict x, float *restrict y, long long n, float a, int threads) {
    #pragma omp parallel for num_threads(threads) schedule(static) if (n >= PARALLEL_MIN_CALLS)
    for (long long i = 0; i < n; ++i) {
        y[i] = UNARY(x[i], a);
    }
}
