// layer_norm forward over the rows of a (rows, n) float matrix: column stride 1, rows x_stride apart; y is
// contiguous. Rows in parallel, a thread's rows in order, each row in two vectorised passes:
//   1. s1 = sum(x - K), s2 = sum((x - K)^2) with K = x[0] (shifted data: no cancellation when the mean is far
//      from 0, which E[x^2] - E[x]^2 suffers), in float chunks of CHUNK elements gathered in doubles;
//   2. y = (x - mean) * rstd * w + b, the row read again from cache (32 KB at n = 8192).
// A thread takes a run of consecutive rows, and pass 1 of its next row runs in the same loop as pass 2 of this
// row: the next row's loads from memory go out among this row's stores instead of after them, faster at every
// benchmark shape than the two passes one row after the other (docs/design/rows.md).
// A row holding inf or NaN has var NaN; its mean is made NaN too (torch's Welford mean is NaN there).
#include <math.h>
#include <omp.h>

#define CHUNK 1024

static long long min_ll(long long a, long long b) { return a < b ? a : b; }

typedef struct {
    double s1, s2;
} Sums;

// (x - mean) * rstd * w[i] + b[i] at element i (w, b constants after inlining: has_w, has_b).
static inline __attribute__((always_inline)) float normalised(const float *restrict x, const float *restrict w,
                                                              const float *restrict b, long long i, float mean,
                                                              float rstd, const int has_w, const int has_b) {
    float v = (x[i] - mean) * rstd;
    if (has_w) v *= w[i];
    if (has_b) v += b[i];
    return v;
}

// One pass over a row of n: with norm, y = (x - mean) * rstd * w + b; where next is not NULL, the shifted sums
// of the row `next` (K = next[0]) in the same loop. norm, has_w and has_b are constants after inlining.
static inline __attribute__((always_inline)) Sums row_pass(const float *restrict x, const float *restrict w,
                                                           const float *restrict b, float *restrict y, long long n,
                                                           float mean, float rstd, const float *restrict next,
                                                           const int norm, const int has_w, const int has_b) {
    double t1 = 0.0, t2 = 0.0;
    const float k = next ? next[0] : 0.0f;
    for (long long lo = 0; lo < n; lo += CHUNK) {
        long long hi = min_ll(lo + CHUNK, n);
        if (next) {
            float a = 0.0f, q = 0.0f;
            #pragma omp simd reduction(+:a, q)
            for (long long i = lo; i < hi; ++i) {
                float d = next[i] - k;
                a += d;
                q += d * d;
                if (norm) y[i] = normalised(x, w, b, i, mean, rstd, has_w, has_b);
            }
            t1 += a;
            t2 += q;
        } else if (norm) {
            #pragma omp simd
            for (long long i = lo; i < hi; ++i) y[i] = normalised(x, w, b, i, mean, rstd, has_w, has_b);
        }
    }
    return (Sums){t1, t2};
}

static inline __attribute__((always_inline)) void rows_span(const float *x, const float *w, const float *b,
                                                            float *y, float *mean, float *rstd, long long lo,
                                                            long long hi, long long n, long long x_stride,
                                                            float eps, const int has_w, const int has_b) {
    if (lo >= hi) return;
    Sums s = row_pass(0, 0, 0, 0, n, 0.0f, 0.0f, x + lo * x_stride, 0, 0, 0);  // the first row's sums
    for (long long r = lo; r < hi; ++r) {
        const float *xr = x + r * x_stride;
        double shift = s.s1 / n;
        double var = s.s2 / n - shift * shift;
        if (var < 0.0) var = 0.0;  // rounding may leave a tiny negative; NaN stays NaN (the test is false)
        float m = var != var ? NAN : (float)(xr[0] + shift);
        float rs = (float)(1.0 / sqrt(var + eps));
        mean[r] = m;
        rstd[r] = rs;
        const float *next = r + 1 < hi ? xr + x_stride : (const float *)0;
        if (next)
            s = row_pass(xr, w, b, y + r * n, n, m, rs, next, 1, has_w, has_b);
        else
            row_pass(xr, w, b, y + r * n, n, m, rs, (const float *)0, 1, has_w, has_b);
    }
}

// w and b may be NULL (no weight, no bias). n >= 1.
void layer_norm_fwd(const float *x, const float *w, const float *b, float *y, float *mean, float *rstd,
                    long long rows, long long n, long long x_stride, float eps, int threads) {
    // below ~16k elements a parallel region (a few microseconds) costs more than it saves
    #pragma omp parallel num_threads(threads) if (rows * n >= 16384)
    {
        const int t = omp_get_thread_num(), team = omp_get_num_threads();
        const long long per = rows / team, extra = rows % team;
        const long long lo = t * per + (t < extra ? t : extra), hi = lo + per + (t < extra);
        switch ((w != 0) * 2 + (b != 0)) {
            case 3: rows_span(x, w, b, y, mean, rstd, lo, hi, n, x_stride, eps, 1, 1); break;
            case 2: rows_span(x, w, b, y, mean, rstd, lo, hi, n, x_stride, eps, 1, 0); break;
            case 1: rows_span(x, w, b, y, mean, rstd, lo, hi, n, x_stride, eps, 0, 1); break;
            default: rows_span(x, w, b, y, mean, rstd, lo, hi, n, x_stride, eps, 0, 0); break;
        }
    }
}
