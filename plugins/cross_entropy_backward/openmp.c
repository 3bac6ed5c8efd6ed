// cross_entropy backward over the rows of a (rows, c) float matrix of logits: class stride 1, rows x_stride
// apart; the gradient is contiguous. One vectorised pass per row, rows in parallel:
//   grad = (exp(x - lse) - smoothing / c) * scale,  and at the target  - (1 - smoothing) * scale too
// scale = grad[r] (reduction none), grad[0] (sum), grad[0] / #non-ignored (mean); ignored rows (and rows of
// scale 0) are zeros. One read of the logits, one write of the gradient; one exp per logit.
#include <math.h>
#include <string.h>

// exp(x) for x <= 0 or NaN, in plain arithmetic so that `omp simd` loops vectorise it (libm's expf does not
// vectorise without -ffast-math); the softmax plugin's: Cody-Waite reduction x = n ln2 + r with
// |r| <= ln2 / 2, Cephes' degree-6 polynomial for e^r (8e-8 relative error), 2^n from its bits. Below -87.3
// the result would be denormal: it is flushed to 0 (exp(-inf) must be exactly 0).
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
