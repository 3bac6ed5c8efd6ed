// The activations of a GEMM's epilogue (linear's activation=) and their derivatives, in float32, as
// plugins/_gemm/activation.py defines them: act 0 none, 1 relu, 2 gelu, 3 gelu_tanh (activation.py's CODES).
// On vector_math.h's exp, erfc and tanh, which gcc vectorises (glibc's are scalar calls), in the gelu op's
// forms: 0.5 z (1 + erf(z/√2)) = 0.5 z erfc(-z/√2), and (1 + tanh u) / 2 = r or e r with e = exp(-2|u|),
// r = 1 / (1 + e), so that neither tail cancels. The switch sits outside each loop, so the loops vectorise.
#ifndef KZ_ACTIVATION_OPENMP_H
#define KZ_ACTIVATION_OPENMP_H
#include "../_elementwise/vector_math.h"

#define KZ_SQRT_HALF 0.70710678118654752f
#define KZ_SQRT_2_OVER_PI 0.79788456080286536f
#define KZ_INV_SQRT_2PI 0.39894228040143268f
#define KZ_KAPPA 0.044715f

// y[i] = act(z[i]) for i < n (y may be z).
static inline void kz_activate_n(const float *z, float *y, long long n, int act) {
    switch (act) {
        case 1:
            for (long long i = 0; i < n; ++i) y[i] = z[i] < 0.0f ? 0.0f : z[i];  // NaN stays NaN
            break;
        case 2:
            for (long long i = 0; i < n; ++i) y[i] = 0.5f * z[i] * kz_erfcf(-z[i] * KZ_SQRT_HALF);
            break;
        case 3:
            for (long long i = 0; i < n; ++i) {
                const float v = z[i], u = KZ_SQRT_2_OVER_PI * (v + KZ_KAPPA * v * v * v);
                const float e = kz_expf(-2.0f * fabsf(u)), r = 1.0f / (1.0f + e);
                y[i] = v * (u >= 0.0f ? r : e * r);
            }
            break;
        default:
            if (y != z)
                for (long long i = 0; i < n; ++i) y[i] = z[i];
    }
}

// dz[i] = g[i·sg]·act'(p[i·sp]) for i < n; for relu p may be z or relu(z) (torch's threshold_backward: 0 where
// p <= 0, NaN passes g).
static inline void kz_activation_grad_n(const float *g, long long sg, const float *p, long long sp, float *dz,
                                        long long n, int act) {
    switch (act) {
        case 1:
            for (long long i = 0; i < n; ++i) dz[i] = p[i * sp] <= 0.0f ? 0.0f : g[i * sg];
            break;
        case 2:
            for (long long i = 0; i < n; ++i) {
                const float v = p[i * sp];
                dz[i] = g[i * sg] * (0.5f * kz_erfcf(-v * KZ_SQRT_HALF) + v * kz_expf(-0.5f * v * v) * KZ_INV_SQRT_2PI);
            }
            break;
        case 3:
            for (long long i = 0; i < n; ++i) {
                const float v = p[i * sp], t = kz_tanhf(KZ_SQRT_2_OVER_PI * (v + KZ_KAPPA * v * v * v));
                const float slope = 0.5f * v * (1.0f - t * t) * KZ_SQRT_2_OVER_PI * (1.0f + 3.0f * KZ_KAPPA * v * v);
                dz[i] = g[i * sg] * (0.5f * (1.0f + t) + slope);
            }
            break;
        default:
            for (long long i = 0; i < n; ++i) dz[i] = g[i * sg];
    }
}
#endif
