// cross_entropy forward over the rows of a (rows, c) float matrix of logits: class stride 1, rows x_stride
// apart. Rows in parallel, each by one thread in two vectorised passes: the max, then sum(exp(x - max)) and
// sum(x) (for label smoothing) together; lse = max + log(sum), and the target's logit read once. The row
// is read twice (the second time from cache: 200 KB at c = 50257) and each logit costs one exp; nothing of
// the row's size is written.
//
// NaN and inf follow torch's log_softmax: the max ignores NaN (x > m is false) but exp(NaN - m) makes the
// sum NaN; a max of +inf gives inf - inf = NaN, a row of only -inf gives -inf - -inf = NaN.
#include "../_openmp/softmax_rows.h"

#define CHUNK 1024

static long long min_ll(long long a, long long b) { return a < b ? a : b; }

// lse of the row, and (with want_sum) the row's sum in *sum_x; float chunks gathered in doubles.
static float row_lse(const float *restrict x, long long n, int want_sum, double *sum_x) {
    const float m = row_max(x, n);
    double s = 0.0, sx = 0.0;
    for (long long lo = 0; lo < n; lo += CHUNK) {
        long long hi = min_ll(lo + CHUNK, n);
        float a = 0.0f, b = 0.0f;
        if (want_sum) {
            #pragma omp simd reduction(+:a, b)
            for (long long i = lo; i < hi; ++i) {
                a += exp_nonpositive(x[i] - m);
                b += x[i];
            }
        } else {
            #pragma omp simd reduction(+:a)
            for (long long i = lo; i < hi; ++i) a += exp_nonpositive(x[i] - m);
        }
        s += a;
        sx += b;
    }
    *sum_x = sx;
    return m + (float)log(s);
}

// loss (rows floats: each row's loss, 0 for ignored rows) and lse (rows floats). reduction: 0 none, 1 mean,
// 2 sum; for 1 and 2, *total receives the reduced loss (the rows added in order, in double).
void ce_fwd(const float *x, const long long *target, float *loss, float *lse, long long rows, long long c,
            long long x_stride, long long ignore_index, float smoothing, int reduction, float *total, int threads) {
    // below ~16k logits a parallel region (a few microseconds) costs more than it saves
    #pragma omp parallel for num_threads(threads) schedule(static) if (rows * c >= 16384)
    for (long long r = 0; r < rows; ++r) {
        const float *xr = x + r * x_stride;
        double sum_x;
        const float l = row_lse(xr, c, smoothing != 0.0f, &sum_x);
        lse[r] = l;
        const long long t = target[r];
        if (t == ignore_index) {
            loss[r] = 0.0f;
        } else {
            float nll = l - xr[t];
            loss[r] = smoothing != 0.0f ? (1.0f - smoothing) * nll + smoothing * (l - (float)(sum_x / c)) : nll;
        }
    }
    if (reduction != 0) {
        double s = 0.0;
        long long count = 0;
        for (long long r = 0; r < rows; ++r) {
            s += loss[r];
            count += target[r] != ignore_index;
        }
        *total = reduction == 1 ? (float)(s / count) : (float)s;  // 0 / 0: NaN, as torch's mean of nothing
    }
}
