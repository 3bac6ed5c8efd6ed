// gelu over a contiguous float array, one parallel loop per formula, on ../_elementwise/vector_math.h's
// exp and erfc, which gcc vectorises (glibc's erff and tanhf are scalar calls, several times slower;
// docs/design/elementwise.md).
//   erf:  0.5 x (1 + erf(x/√2)) = 0.5 x erfc(-x/√2): the left tail keeps its digits instead of
//         cancelling in 1 + erf.
//   tanh: 0.5 x (1 + tanh(u)) with e = exp(-2|u|), r = 1 / (1 + e): (1 + tanh u) / 2 = r for u >= 0
//         and e r for u < 0, the same cancellation avoided.
// x = -inf gives NaN (-inf * 0), as torch; +inf gives inf. (0.5f * x) is formed first: x * erfc would
// overflow for |x| above FLT_MAX / 2.
#include "../_openmp/parallel.h"
#include "../_elementwise/vector_math.h"

#define SQRT_HALF 0.70710678118654752f
#define SQRT_2_OVER_PI 0.79788456080286536f
#define KAPPA 0.044715f

void gelu_erf(const float *restrict x, float *restrict y, long long n, int threads) {
    #pragma omp parallel for num_threads(threads) schedule(static) if (n >= PARALLEL_MIN_CALLS)
    for (long long i = 0; i < n; ++i) {
        const float v = x[i];
        y[i] = 0.5f * v * kz_erfcf(-v * SQRT_HALF);
    }
}

void gelu_tanh(const float *restrict x, float *restrict y, long long n, int threads) {
    #pragma omp parallel for num_threads(threads) schedule(static) if (n >= PARALLEL_MIN_CALLS)
    for (long long i = 0; i < n; ++i) {
        const float v = x[i];
        const float u = SQRT_2_OVER_PI * (v + KAPPA * v * v * v);
        const float e = kz_expf(-2.0f * fabsf(u)), r = 1.0f / (1.0f + e);
        y[i] = v * (u >= 0.0f ? r : e * r);
    }
}
