// dropout over a contiguous float array: y[i] = x[i] · (keep_i ? scale : 0), keep_i from the
// 32-bit hash of (seed, i) that plugins/dropout/__init__.py defines (uint32 arithmetic wraps in C).
// The hash is integer multiplies, shifts and xors: the loop vectorises (AVX2: vpmulld).
#include "../_openmp/parallel.h"
#include <stdint.h>
#include "hash.h"

void dropout(const float *restrict x, float *restrict y, long long n, uint32_t seed_lo, uint32_t seed_hi,
             uint32_t threshold, float scale, int threads) {
    const uint32_t k1 = dropout_key(seed_lo, seed_hi);
    const uint32_t k2 = mix(k1 + GOLDEN);
    #pragma omp parallel for simd num_threads(threads) schedule(static) if (parallel: n >= PARALLEL_MIN)
    for (long long i = 0; i < n; ++i) {
        const uint32_t h = dropout_hash((uint64_t)i, k1, k2);
        y[i] = x[i] * ((h >> 8) >= threshold ? scale : 0.0f);  // x · 0: a dropped NaN or inf gives NaN, as torch
    }
}
