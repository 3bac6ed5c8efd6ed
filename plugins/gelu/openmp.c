// gelu over a contiguous float array, one parallel loop per formula. erff and tanhf are
// glibc's (about 1 ulp); gcc cannot vectorise calls to them without -ffast-math, which
// would break NaN and inf, so each element costs one scalar call.
// (0.5f * x) is formed first: x * (1 + erf) would overflow for |x| above FLT_MAX / 2.
#include "../_openmp/parallel.h"
#include <math.h>

#define SQRT_HALF 0.70710678118654752f
#define SQRT_2_OVER_PI 0.79788456080286536f
#define KAPPA 0.044715f

void gelu_erf(const float *restrict x, float *restrict y, long long n, int threads) {
    #pragma omp parallel for num_threads(threads) schedule(static) if (n >= PARALLEL_MIN_CALLS)
    for (long long i = 0; i < n; ++i) {
        float v = x[i];
        y[i] = 0.5f * v * (1.0f + erff(v * SQRT_HALF));  // -inf: -inf * 0 = NaN, as torch
    }
}

void gelu_tanh(const float *restrict x, float *restrict y, long long n, int threads) {
    #pragma omp parallel for num_threads(threads) schedule(static) if (n >= PARALLEL_MIN_CALLS)
    for (long long i = 0; i < n; ++i) {
        float v = x[i];
        y[i] = 0.5f * v * (1.0f + tanhf(SQRT_2_OVER_PI * (v + KAPPA * v * v * v)));
    }
}
