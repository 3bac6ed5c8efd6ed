// One Adam / AdamW step over contiguous float arrays, in place, in torch's _single_tensor_adam order:
//   p *= decay (AdamW) or g = grad + wd * p (Adam's L2);  m = lerp(m, g, w1);  v = beta2 * v + (1 - beta2) * g^2;
//   v_max = max(v_max, v) (amsgrad);  p -= step_size * m / (sqrt(v or v_max) * (1 / bc2_sqrt) + eps)
// One pass over memory: each array is read once and written once. lerp is torch's: w1 < 0.5 ? m + w1 * (g - m)
// : g - (g - m) * (1 - w1). The max propagates NaN as torch.maximum does.
//
// Torch divides sqrt(v) by bc2_sqrt = sqrt(1 - beta2^step); the loop multiplies by its reciprocal, taken once
// per call: one rounding more or less (well inside the float32 tolerance), and one vector division less per 16
// elements. The square root and the divisions make the loop compute-bound while the arrays sit in cache, where
// the division saved shows (docs/design/elementwise.md).
//
// Vectorised: each thread runs one loop specialised for its variant (the flags are constants after inlining,
// so no branch is left in it). The backend compiles with -fno-math-errno, so sqrtf becomes the vector square
// root (IEEE, as torch's). Before that flag a sqrtf kept the loop scalar and a bit-trick square root with
// Newton steps stood in for it; sqrtf measured no slower.
#include "../_openmp/parallel.h"
#include <math.h>
#include <omp.h>

typedef struct {
    float step_size, bc2_sqrt, w1, beta2, eps, weight_decay, decay;
} Adam;

static inline __attribute__((always_inline)) void adam_span(float *restrict p, const float *restrict grad,
                                                            float *restrict m, float *restrict v,
                                                            float *restrict v_max, long long lo, long long hi,
                                                            Adam a, const int l2, const int shrink,
                                                            const int amsgrad) {
    const float w2 = 1.0f - a.beta2, keep1 = 1.0f - a.w1, inv_bc2 = 1.0f / a.bc2_sqrt;
    #pragma omp simd
    for (long long i = lo; i < hi; ++i) {
        const float pi = shrink ? p[i] * a.decay : p[i];
        const float g = l2 ? grad[i] + a.weight_decay * pi : grad[i];
        const float mi = a.w1 < 0.5f ? m[i] + a.w1 * (g - m[i]) : g - (g - m[i]) * keep1;
        const float vi = v[i] * a.beta2 + w2 * g * g;
        float vhat = vi;
        if (amsgrad) {
            const float old = v_max[i];
            vhat = (old != old || vi != vi) ? old + vi : (old > vi ? old : vi);
            v_max[i] = vhat;
        }
        m[i] = mi;
        v[i] = vi;
        p[i] = pi - a.step_size * (mi / (sqrtf(vhat) * inv_bc2 + a.eps));
    }
}
// This thread's share of n elements (whole 64-byte lines) in a team of ``team``, updated by the loop of the
// variant: mode 0 no weight decay, 1 AdamW's shrink, 2 Adam's L2.
static inline void adam_share(float *restrict p, const float *restrict grad, float *restrict m, float *restrict v,
                              float *restrict v_max, long long n, int thread, int team, Adam a, int mode,
                              int amsgrad) {
    const long long step = ((n + team - 1) / team + 15) / 16 * 16;
    const long long lo = thread * step < n ? thread * step : n, hi = lo + step < n ? lo + step : n;
    switch (mode * 2 + (amsgrad != 0)) {
        case 0: adam_span(p, grad, m, v, v_max, lo, hi, a, 0, 0, 0); break;
        case 1: adam_span(p, grad, m, v, v_max, lo, hi, a, 0, 0, 1); break;
        case 2: adam_span(p, grad, m, v, v_max, lo, hi, a, 0, 1, 0); break;
        case 3: adam_span(p, grad, m, v, v_max, lo, hi, a, 0, 1, 1); break;
        case 4: adam_span(p, grad, m, v, v_max, lo, hi, a, 1, 0, 0); break;
        default: adam_span(p, grad, m, v, v_max, lo, hi, a, 1, 0, 1); break;
    }
}

static inline int adam_mode(float weight_decay, int decoupled) {
    return weight_decay == 0.0f ? 0 : decoupled ? 1 : 2;  // none, AdamW's shrink, Adam's L2
}
