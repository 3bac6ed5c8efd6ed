// What the softmax and cross-entropy kernels share: a vectorisable exp for non-positive arguments and a row's
// max. Included by softmax/openmp.c, cross_entropy/openmp.c and cross_entropy_backward/openmp.c.
#ifndef KZ_SOFTMAX_ROWS_H
#define KZ_SOFTMAX_ROWS_H
#include <math.h>
#include <string.h>

// exp(x) for x <= 0 or NaN, in plain arithmetic so that `omp simd` loops vectorise it (libm's
// expf does not vectorise without -ffast-math). Cody-Waite reduction x = n ln2 + r with
// |r| <= ln2 / 2, Cephes' degree-6 polynomial for e^r (8e-8 relative error), 2^n from its bits.
// Below -87.3 the result would be denormal: it is flushed to 0 (exp(-inf) must be exactly 0).
#pragma omp declare simd notinbranch
static inline float exp_nonpositive(float x) {
    float t = x < -87.3f ? -87.3f : x;  // NaN stays NaN: the comparison is false
    float shift = 12582912.0f;          // 1.5 * 2^23: adding it rounds to an integer
    float fn = t * 1.44269504089f + shift;
    int n;
    memcpy(&n, &fn, sizeof n);
    n -= 0x4B400000;                    // the bits of `shift`: leaves round(t / ln2)
    fn -= shift;
    float r = t - fn * 0.693359375f;    // ln2 in two parts: fn * the first is exact
    r = r + fn * 2.12194440e-4f;
    float p = 1.9875691500e-4f;
    p = p * r + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    p = p * r * r + r + 1.0f;
    int bits = (n + 127) << 23;         // 2^n: n >= -126 after the clamp
    float scale;
    memcpy(&scale, &bits, sizeof scale);
    return x < -87.3f ? 0.0f : p * scale;
}

// The largest of x[0..n); NaN is passed over (x > m is false), -inf for a row of -inf or n = 0.
static inline float row_max(const float *restrict x, long long n) {
    float m = -INFINITY;
    #pragma omp simd reduction(max:m)
    for (long long i = 0; i < n; ++i) m = x[i] > m ? x[i] : m;
    return m;
}

#endif
