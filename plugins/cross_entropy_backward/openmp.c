// cross_entropy backward over the rows of a (rows, c) float matrix of logits: class stride 1, rows x_stride
// apart; the gradient is contiguous. One vectorised pass per row, rows in parallel:
//   grad = (exp(x - lse) - smoothing / c) * scale,  and at the target  - (1 - smoothing) * scale too
// scale = grad[r] (reduction none), grad[0] (sum), grad[0] / #non-ignored (mean); ignored rows (and rows of
// scale 0) are zeros. One read of the logits, one write of the gradient; one exp per logit.
#include "../_openmp/softmax_rows.h"

// reduction: 0 none (grad holds one value per row), 1 mean, 2 sum (grad holds one value).
void ce_bwd(const float *x, const long long *target, const float *lse, const float *grad, float *out,
            long long rows, long long c, long long x_stride, long long ignore_index, float smoothing, int reduction,
            int threads) {
    long long count = 0;
    if (reduction == 1)
        for (long long r = 0; r < rows; ++r) count += target[r] != ignore_index;
    const float uniform = reduction == 1 ? (count ? grad[0] / (float)count : 0.0f) : reduction == 2 ? grad[0] : 0.0f;
    const float spread = smoothing / (float)c;
    // below ~16k logits a parallel region (a few microseconds) costs more than it saves
    #pragma omp parallel for num_threads(threads) schedule(static) if (rows * c >= 16384)
    for (long long r = 0; r < rows; ++r) {
        const float *restrict xr = x + r * x_stride;
        float *restrict gr = out + r * c;
        const long long t = target[r];
        const float scale = t == ignore_index ? 0.0f : reduction == 0 ? grad[r] : uniform;
        if (scale == 0.0f) {
            memset(gr, 0, c * sizeof(float));
            continue;
        }
        const float l = lse[r];
        #pragma omp simd
        for (long long i = 0; i < c; ++i) gr[i] = (exp_nonpositive(xr[i] - l) - spread) * scale;
        gr[t] = (exp_nonpositive(xr[t] - l) - (1.0f - smoothing) - spread) * scale;
    }
}
