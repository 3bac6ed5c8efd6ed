// max_pool2d over contiguous NCHW planes: one parallel loop over (plane, output row); each output scans
// its window clipped to the image row by row, taking an element greater than the best so far or NaN
// (`v != v`: no -ffast-math here), so ties keep the first, a NaN wins (the last NaN), and a window of
// -inf gives its first in-image element, as torch does.
#include "../_openmp/parallel.h"
#include <math.h>

void max_pool2d(const float *x, float *out, long long *indices, long long planes, long long h, long long w,
                long long oh, long long ow, long long kh, long long kw, long long sh, long long sw, long long ph,
                long long pw, int threads) {
#pragma omp parallel for collapse(2) num_threads(threads) schedule(static) if (planes * oh * ow >= PARALLEL_MIN)
    for (long long p = 0; p < planes; ++p) {
        for (long long i = 0; i < oh; ++i) {
            const float *plane = x + p * h * w;
            long long h0 = i * sh - ph, h1 = h0 + kh < h ? h0 + kh : h;
            if (h0 < 0) h0 = 0;
            for (long long j = 0; j < ow; ++j) {
                long long w0 = j * sw - pw, w1 = w0 + kw < w ? w0 + kw : w;
                if (w0 < 0) w0 = 0;
                float best = -INFINITY;
                long long at = h0 * w + w0;
                for (long long y = h0; y < h1; ++y) {
                    for (long long xx = w0; xx < w1; ++xx) {
                        float v = plane[y * w + xx];
                        if (v > best || v != v) best = v, at = y * w + xx;
                    }
                }
                out[(p * oh + i) * ow + j] = best;
                indices[(p * oh + i) * ow + j] = at;
            }
        }
    }
}
