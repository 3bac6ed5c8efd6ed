// One SGD step over contiguous float arrays, in place (torch's _single_tensor_sgd order):
//   g = grad + wd * p;  b = momentum * b + (1 - dampening) * g;  g = nesterov ? g + momentum * b : b;
//   p = p - lr * g
// One pass: each element's param, grad and buffer are read once and written once. Each thread runs one loop
// specialised for the variant (the flags are constants after inlining): with the flags as variables gcc
// if-converts every branch into masked loads and stores, about half as fast.
#include "../_openmp/parallel.h"
#include <omp.h>

typedef struct {
    float lr, momentum, keep, weight_decay;  // keep = 1 - dampening
} Sgd;

static inline __attribute__((always_inline)) void sgd_span(float *restrict p, const float *restrict grad,
                                                           float *restrict b, long long lo, long long hi, Sgd s,
                                                           const int decay, const int momentum,
                                                           const int nesterov) {
    #pragma omp simd
    for (long long i = lo; i < hi; ++i) {
        float g = decay ? grad[i] + s.weight_decay * p[i] : grad[i];
        if (momentum) {
            const float buf = s.momentum * b[i] + s.keep * g;
            b[i] = buf;
            g = nesterov ? g + s.momentum * buf : buf;
        }
        p[i] = p[i] - s.lr * g;
    }
}

void sgd_update(float *restrict p, const float *restrict grad, float *restrict b, long long n, float lr,
                float momentum, float dampening, float weight_decay, int nesterov, int threads) {
    const Sgd s = {lr, momentum, 1.0f - dampening, weight_decay};
    const int variant = (weight_decay != 0.0f) * 4 + (momentum != 0.0f) * 2 + (momentum != 0.0f && nesterov);
    // a second thread pays from PARALLEL_MIN elements on, a call through Python included
    #pragma omp parallel num_threads(threads) if (n >= PARALLEL_MIN)
    {
        const int t = omp_get_thread_num(), team = omp_get_num_threads();
        const long long step = ((n + team - 1) / team + 15) / 16 * 16;  // whole 64-byte lines per thread
        const long long lo = t * step < n ? t * step : n, hi = lo + step < n ? lo + step : n;
        switch (variant) {
            case 0: sgd_span(p, grad, b, lo, hi, s, 0, 0, 0); break;
            case 2: sgd_span(p, grad, b, lo, hi, s, 0, 1, 0); break;
            case 3: sgd_span(p, grad, b, lo, hi, s, 0, 1, 1); break;
            case 4: sgd_span(p, grad, b, lo, hi, s, 1, 0, 0); break;
            case 6: sgd_span(p, grad, b, lo, hi, s, 1, 1, 0); break;
            default: sgd_span(p, grad, b, lo, hi, s, 1, 1, 1); break;
        }
    }
}
