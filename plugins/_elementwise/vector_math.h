// exp, erfc and tanh over floats as inline code that gcc vectorises. glibc's expf and erff are scalar calls
// unless -ffast-math, which would also break NaN and inf; these are several times faster (figures in
// docs/design/elementwise.md). NaN and ±inf give what libm gives. Errors below were measured against float64 on 4M points of [-110, 95].
#ifndef KZ_VECTOR_MATH_H
#define KZ_VECTOR_MATH_H
#include <math.h>

// exp(x) = 2^k * exp(r), k = rint(x * log2 e), r = x - k * ln 2 in two steps (Cody & Waite) so that r
// is exact, |r| <= ln2 / 2; exp(r) by Cephes' expf polynomial: 0.71 ulp at most. 2^k is
// applied in two halves, so that results that are subnormal (x < -87.3) or near overflow need no
// special case.
static inline float kz_expf(float x) {
    const float xc = x > 88.8f ? 88.8f : (x < -104.0f ? -104.0f : (x == x ? x : 0.0f));
    const float k = rintf(xc * 1.44269504088896341f);
    float r = xc - k * 0.693359375f;
    r = r - k * -2.12194440e-4f;
    const float p = ((((1.9875691500e-4f * r + 1.3981999507e-3f) * r + 8.3334519073e-3f) * r
                      + 4.1665795894e-2f) * r + 1.6666665459e-1f) * r + 5.0000001201e-1f;
    const float y = p * r * r + r + 1.0f;
    const int k1 = (int)k / 2, k2 = (int)k - k1;  // each in [-75, 64]: normal powers of two
    const union { int i; float f; } s1 = {(k1 + 127) << 23}, s2 = {(k2 + 127) << 23};
    const float result = y * s1.f * s2.f;
    return x != x ? x : (x > 88.7228394f ? INFINITY : result);
}

// erfc(x) by Numerical Recipes' erfcc (a Chebyshev fit of erfc(z) * exp(z^2) in t = 2 / (2 + z), 1.2e-7
// relative in exact arithmetic): in float32 under 3.6e-7 absolute everywhere, 4.1e-7 relative for
// |x| <= 1 and 1.2e-6 for |x| <= 4 (exp(-z^2) inherits the rounding of z^2, as in any float32 formula),
// so the small right tail keeps its digits. erfc(-inf) = 2, erfc(inf) = 0, erfc(NaN) = NaN.
static inline float kz_erfcf(float x) {
    const float z = fabsf(x), t = 2.0f / (2.0f + z);
    const float q = -1.26551223f + t * (1.00002368f + t * (0.37409196f + t * (0.09678418f + t * (-0.18628806f
                    + t * (0.27886807f + t * (-1.13520398f + t * (1.48851587f + t * (-0.82215223f
                    + t * 0.17087277f))))))));
    const float tail = t * kz_expf(q - z * z);  // erfc(|x|)
    return x >= 0.0f ? tail : (x < 0.0f ? 2.0f - tail : x);
}

// tanh(x) by Cephes' tanhf: an odd polynomial for |x| < 0.625, 1 - 2 / (exp(2|x|) + 1) beyond (about
// 2 ulp), both computed (branch-free, so the loop vectorises) and the sign copied from x: tanh(-0) = -0,
// tanh(±inf) = ±1, NaN stays NaN.
static inline float kz_tanhf(float x) {
    const float z = fabsf(x), s = z * z;
    const float small = ((((-5.70498872745e-3f * s + 2.06390887954e-2f) * s - 5.37397155531e-2f) * s
                          + 1.33314422036e-1f) * s - 3.33332819422e-1f) * s * z + z;
    const float large = 1.0f - 2.0f / (kz_expf(2.0f * z) + 1.0f);
    return copysignf(z < 0.625f ? small : large, x);
}
#if defined(__AVX512F__) && !defined(KZ_PORTABLE)
#include <immintrin.h>
#define KZ_VECTOR16 1

// kz_expf of 16 lanes in AVX-512: the same reduction and polynomial; vscalefps applies 2^k, and rounds a
// subnormal result correctly, so no halves are needed. x is clamped to [-104, 89] first (exp(-104)
// rounds to 0; from 88.73 on the result is inf); vmaxps and vminps return their second operand when
// one is NaN, so with x second NaN passes through.
static inline __m512 kz_expf16(__m512 x) {
    const __m512 xc = _mm512_min_ps(_mm512_set1_ps(89.0f), _mm512_max_ps(_mm512_set1_ps(-104.0f), x));
    const __m512 k = _mm512_roundscale_ps(_mm512_mul_ps(xc, _mm512_set1_ps(1.44269504088896341f)),
                                          _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512 r = _mm512_fnmadd_ps(k, _mm512_set1_ps(0.693359375f), xc);
    r = _mm512_fnmadd_ps(k, _mm512_set1_ps(-2.12194440e-4f), r);
    __m512 p = _mm512_set1_ps(1.9875691500e-4f);
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.3981999507e-3f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(8.3334519073e-3f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(4.1665795894e-2f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.6666665459e-1f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(5.0000001201e-1f));
    const __m512 y = _mm512_add_ps(_mm512_fmadd_ps(p, _mm512_mul_ps(r, r), r), _mm512_set1_ps(1.0f));
    return _mm512_scalef_ps(y, k);
}

// kz_erfcf of 16 lanes: the same fit, its exp by kz_expf16. The lanes of x >= 0 take erfc(|x|), those of x < 0
// 2 - erfc(|x|), and NaN lanes keep x.
static inline __m512 kz_erfcf16(__m512 x) {
    const __m512 z = _mm512_andnot_ps(_mm512_set1_ps(-0.0f), x);
    const __m512 t = _mm512_div_ps(_mm512_set1_ps(2.0f), _mm512_add_ps(_mm512_set1_ps(2.0f), z));
    __m512 q = _mm512_set1_ps(0.17087277f);
    q = _mm512_fmadd_ps(q, t, _mm512_set1_ps(-0.82215223f));
    q = _mm512_fmadd_ps(q, t, _mm512_set1_ps(1.48851587f));
    q = _mm512_fmadd_ps(q, t, _mm512_set1_ps(-1.13520398f));
    q = _mm512_fmadd_ps(q, t, _mm512_set1_ps(0.27886807f));
    q = _mm512_fmadd_ps(q, t, _mm512_set1_ps(-0.18628806f));
    q = _mm512_fmadd_ps(q, t, _mm512_set1_ps(0.09678418f));
    q = _mm512_fmadd_ps(q, t, _mm512_set1_ps(0.37409196f));
    q = _mm512_fmadd_ps(q, t, _mm512_set1_ps(1.00002368f));
    q = _mm512_fmadd_ps(q, t, _mm512_set1_ps(-1.26551223f));
    const __m512 tail = _mm512_mul_ps(t, kz_expf16(_mm512_fnmadd_ps(z, z, q)));  // erfc(|x|)
    const __mmask16 negative = _mm512_cmp_ps_mask(x, _mm512_setzero_ps(), _CMP_LT_OQ);
    const __mmask16 positive = _mm512_cmp_ps_mask(x, _mm512_setzero_ps(), _CMP_GE_OQ);
    const __m512 r = _mm512_mask_blend_ps(negative, x, _mm512_sub_ps(_mm512_set1_ps(2.0f), tail));
    return _mm512_mask_blend_ps(positive, r, tail);
}

// kz_tanhf of 16 lanes: both formulas on |x|, the sign bit of x put on the result (both are >= 0).
// 1 / (exp(2|x|) + 1) by vrcp14ps and one Newton step (relative error about 2^-28) instead of a
// division; |x| is capped at 20 there (tanh rounds to 1 from 9.01 on), so that the reciprocal never
// meets inf (x second in vminps: NaN passes through, and on to the result).
static inline __m512 kz_tanhf16(__m512 x) {
    const __m512 sign = _mm512_set1_ps(-0.0f), one = _mm512_set1_ps(1.0f);
    const __m512 z = _mm512_andnot_ps(sign, x), s = _mm512_mul_ps(z, z);
    __m512 p = _mm512_set1_ps(-5.70498872745e-3f);
    p = _mm512_fmadd_ps(p, s, _mm512_set1_ps(2.06390887954e-2f));
    p = _mm512_fmadd_ps(p, s, _mm512_set1_ps(-5.37397155531e-2f));
    p = _mm512_fmadd_ps(p, s, _mm512_set1_ps(1.33314422036e-1f));
    p = _mm512_fmadd_ps(p, s, _mm512_set1_ps(-3.33332819422e-1f));
    const __m512 small = _mm512_fmadd_ps(_mm512_mul_ps(p, s), z, z);
    const __m512 d = _mm512_add_ps(kz_expf16(_mm512_min_ps(_mm512_set1_ps(40.0f), _mm512_add_ps(z, z))), one);
    __m512 inv = _mm512_rcp14_ps(d);
    inv = _mm512_mul_ps(inv, _mm512_fnmadd_ps(d, inv, _mm512_set1_ps(2.0f)));
    const __m512 large = _mm512_fnmadd_ps(_mm512_set1_ps(2.0f), inv, one);
    const __mmask16 is_small = _mm512_cmp_ps_mask(z, _mm512_set1_ps(0.625f), _CMP_LT_OQ);
    return _mm512_or_ps(_mm512_mask_blend_ps(is_small, large, small), _mm512_and_ps(sign, x));
}
#endif
#endif
