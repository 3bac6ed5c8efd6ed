// relu over a contiguous float array. `x < 0 ? 0 : x` keeps NaN (the comparison is false).
#include "../_openmp/parallel.h"
#include <stddef.h>

void relu(const float *restrict x, float *restrict y, long long n, int threads) {
    #pragma omp parallel for simd num_threads(threads) schedule(static) if (parallel: n >= PARALLEL_MIN)
    for (long long i = 0; i < n; ++i) {
        y[i] = x[i] < 0.0f ? 0.0f : x[i];
    }
}
