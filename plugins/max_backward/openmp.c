// max's gradient over a contiguous (outer, reduced, inner) grad_x: zeroed in parallel, then each of the
// outer * inner outputs writes its grad at (a, indices[a, b], b). Distinct outputs name distinct elements,
// so the writes never collide and need no ordering. Returns how many indices fall outside [0, reduced)
// (those write nothing).
#include <string.h>

#define ZERO_SPAN 16384  // floats one thread zeroes at a time: 64 KB

long long max_backward(const float *g, const long long *indices, float *grad_x, long long outer,
                       long long reduced, long long inner, int threads) {
    long long total = outer * reduced * inner, outputs = outer * inner, bad = 0;
    long long spans = (total + ZERO_SPAN - 1) / ZERO_SPAN;
    // below ~32k elements a parallel region (a few microseconds) costs more than it saves
    #pragma omp parallel num_threads(threads) if (total >= 32768)
    {
        #pragma omp for schedule(static)
        for (long long s = 0; s < spans; ++s) {
            long long lo = s * ZERO_SPAN, n = total - lo < ZERO_SPAN ? total - lo : ZERO_SPAN;
            memset(grad_x + lo, 0, sizeof(float) * (size_t)n);
        }  // implicit barrier: every element is zero before any is written
        #pragma omp for schedule(static) reduction(+ : bad)
        for (long long o = 0; o < outputs; ++o) {
            long long r = indices[o];
            if (r < 0 || r >= reduced) {
                ++bad;
                continue;
            }
            long long a = o / inner, b = o - a * inner;
            grad_x[(a * reduced + r) * inner + b] = g[o];
        }
    }
    return bad;
}
