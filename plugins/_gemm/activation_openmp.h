// The activations of a GEMM's epilogue (linear's activation=) and their derivatives, in float32, as
// plugins/_gemm/activation.py defines them: act 0 none, 1 relu, 2 gelu, 3 gelu_tanh (activation.py's CODES).
// glibc's erff, expf and tanhf: they run once per output, against K products each.
#ifndef KZ_ACTIVATION_OPENMP_H
#define KZ_ACTIVATION_OPENMP_H
#include <math.h>

#define KZ_SQRT_HALF 0.70710678118654752f
#define KZ_SQRT_2_OVER_PI 0.79788456080286536f
#define KZ_INV_SQRT_2PI 0.39894228040143268f
#define KZ_KAPPA 0.044715f

static inline float kz_activate(float z, int act) {
    switch (act) {
        case 1: return z < 0.0f ? 0.0f : z;  // NaN stays NaN
        case 2: return 0.5f * z * (1.0f + erff(z * KZ_SQRT_HALF));
        case 3: return 0.5f * z * (1.0f + tanhf(KZ_SQRT_2_OVER_PI * (z + KZ_KAPPA * z * z * z)));
        default: return z;
    }
}

// g·act'(p); for relu p may be z or relu(z) (torch's threshold_backward: 0 where p <= 0, NaN passes g).
static inline float kz_activation_grad(float g, float p, int act) {
    switch (act) {
        case 1: return p <= 0.0f ? 0.0f : g;
        case 2: return g * (0.5f * (1.0f + erff(p * KZ_SQRT_HALF)) + p * expf(-0.5f * p * p) * KZ_INV_SQRT_2PI);
        case 3: {
            const float t = tanhf(KZ_SQRT_2_OVER_PI * (p + KZ_KAPPA * p * p * p));
            return g * (0.5f * (1.0f + t) + 0.5f * p * (1.0f - t * t) * KZ_SQRT_2_OVER_PI * (1.0f + 3.0f * KZ_KAPPA * p * p));
        }
        default: return g;
    }
}
#endif
