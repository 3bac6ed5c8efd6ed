// gelu_backward: out = grad * gelu'(x) (a = grad, b = x), through the shared binary functions, once
// per formula: gelu_backward_none_* and gelu_backward_tanh_* (_contiguous, _strided; see
// ../_elementwise/binary_openmp.h). exp and erfc are ../_elementwise/vector_math.h's, which gcc
// vectorises (glibc's are scalar calls; 8x slower here): errors under a tenth of float32's tolerance
// over x in [-12, 12].
#include "../_elementwise/vector_math.h"

#define SQRT_HALF 0.70710678118654752f
#define INV_SQRT_2PI 0.39894228040143268f
#define SQRT_2_OVER_PI 0.79788456080286536f
#define KAPPA 0.044715f

// cdf + x * pdf, cdf = (1 + erf(x/√2)) / 2 = erfc(-x/√2) / 2; x = ±inf: x * 0 = NaN, as torch
static inline float gelu_none_derivative(float x) {
    return 0.5f * kz_erfcf(-x * SQRT_HALF) + x * (kz_expf(-0.5f * x * x) * INV_SQRT_2PI);
}

// (1 + t)/2 + x/2 * (1 - t^2) * du with t = tanh(u), written with e = exp(-2|u|), r = 1 / (1 + e):
// (1 + t)/2 = r (u >= 0) or e*r (u < 0), 1 - t^2 = 4*e*r^2 (accurate where t rounds to 1; see the
// op's spec). x = ±inf: u = ±inf, e = 0, then inf * 0 = NaN, as torch.
static inline float gelu_tanh_derivative(float x) {
    const float u = SQRT_2_OVER_PI * (x + KAPPA * x * x * x);
    const float e = kz_expf(-2.0f * fabsf(u));
    const float r = 1.0f / (1.0f + e);
    const float half_one_plus_t = u >= 0.0f ? r : e * r;
    const float du = SQRT_2_OVER_PI * (1.0f + 3.0f * KAPPA * x * x);
    return half_one_plus_t + 2.0f * x * e * r * r * du;
}

#ifdef KZ_VECTOR16
// gelu_none_derivative of 16 lanes on kz_erfcf16 and kz_expf16: faster than gcc's vectorisation of the scalar
// one (docs/design/elementwise.md)
static inline __m512 gelu_none_derivative16(__m512 x) {
    const __m512 cdf = _mm512_mul_ps(_mm512_set1_ps(0.5f), kz_erfcf16(_mm512_mul_ps(x, _mm512_set1_ps(-SQRT_HALF))));
    const __m512 pdf = _mm512_mul_ps(kz_expf16(_mm512_mul_ps(_mm512_set1_ps(-0.5f), _mm512_mul_ps(x, x))),
                                     _mm512_set1_ps(INV_SQRT_2PI));
    return _mm512_fmadd_ps(x, pdf, cdf);
}
#define KZ_BINARY_OP16(grad, x) _mm512_mul_ps((grad), gelu_none_derivative16(x))
#endif
#define KZ_BINARY_NAME(suffix) gelu_backward_none_##suffix
#define KZ_BINARY_OP(grad, x) ((grad) * gelu_none_derivative(x))
#include "../_elementwise/binary_openmp.h"

#define KZ_BINARY_NAME(suffix) gelu_backward_tanh_##suffix
#define KZ_BINARY_OP(grad, x) ((grad) * gelu_tanh_derivative(x))
#include "../_elementwise/binary_openmp.h"
