// The one OpenMP loop of the unary elementwise ops: y[i] = UNARY(x[i], a) over a contiguous
// float array, a being the op's scalar parameter (pow's exponent; the others ignore it). Each
// op's openmp.c defines UNARY and includes this file, so each op builds its own library with
// its expression inlined into the loop. The function is `unary`, or KZ_UNARY_NAME where defined:
// an op may include the file once per formula (pow does, per exponent case); UNARY, UNARY16 and
// KZ_UNARY_NAME are undefined at the end.
//
// glibc's logf and powf (under 1 ulp) run one element at a time: gcc vectorises such calls only
// through libmvec's 4-ulp variants, declared under -ffast-math alone, which would also break NaN and
// inf. exp and tanh use vector_math.h's functions instead (UNARY16: their AVX-512 versions where the
// CPU has them).
#include "../_openmp/parallel.h"
#include <math.h>

#ifndef UNARY
#error "define UNARY(x, a) before including unary_openmp.h"
#endif
#ifndef KZ_UNARY_NAME
#define KZ_UNARY_NAME unary
#endif

#if defined(UNARY16) && defined(KZ_VECTOR16)
// UNARY16(v, a): the same function of 16 lanes in AVX-512 (vector_math.h), for whole vectors; UNARY for
// the last n % 16 elements.
void KZ_UNARY_NAME(const float *restrict x, float *restrict y, long long n, float a, int threads) {
    const long long vectors = n / 16;
    #pragma omp parallel for num_threads(threads) schedule(static) if (n >= PARALLEL_MIN_CALLS)
    for (long long v = 0; v < vectors; ++v) {
        _mm512_storeu_ps(y + 16 * v, UNARY16(_mm512_loadu_ps(x + 16 * v), a));
    }
    for (long long i = 16 * vectors; i < n; ++i) {
        y[i] = UNARY(x[i], a);
    }
}
#else
void KZ_UNARY_NAME(const float *restrict x, float *restrict y, long long n, float a, int threads) {
    #pragma omp parallel for num_threads(threads) schedule(static) if (n >= PARALLEL_MIN_CALLS)
    for (long long i = 0; i < n; ++i) {
        y[i] = UNARY(x[i], a);
    }
}
#endif

#undef UNARY
#undef UNARY16
#undef KZ_UNARY_NAME
