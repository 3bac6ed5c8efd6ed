// layer_norm forward over the rows of a (rows, n) float matrix: column stride 1, rows x_stride apart; y is
// contiguous. Rows in parallel, each row by one thread in two vectorised passes:
//   1. s1 = sum(x - K), s2 = sum((x - K)^2) with K = x[0] (shifted data: no cancellation when the mean is far
//      from 0, which E[x^2] - E[x]^2 suffers), in float chunks of CHUNK elements gathered in doubles;
//   2. y = (x - mean) * rstd * w + b, the row read again from cache (32 KB at n = 8192).
// A row holding inf or NaN has var NaN; its mean is made NaN too (torch's Welford mean is NaN there).
#include <math.h>

#define CHUNK 1024

static long long min_ll(long long a, long long b) { return a < b ? a : b; }

static void shifted_sums(const float *restrict x, long long n, float k, double *s1, double *s2) {
    double t1 = 0.0, t2 = 0.0;
    for (long long lo = 0; lo < n; lo += CHUNK) {
        long long hi = min_ll(lo + CHUNK, n);
        float a = 0.0f, q = 0.0f;
        #pragma omp simd reduction(+:a, q)
        for (long long i = lo; i < hi; ++i) {
            float d = x[i] - k;
            a += d;
            q += d * d;
        }
        t1 += a;
        t2 += q;
    }
    *s1 = t1;
    *s2 = t2;
}

static void normalise(const float *restrict x, const float *restrict w, const float *restrict b, float *restrict y,
                      long long n, float mean, float rstd) {
    if (w && b) {
        #pragma omp simd
        for (long long i = 0; i < n; ++i) y[i] = (x[i] - mean) * rstd * w[i] + b[i];
    } else if (w) {
        #pragma omp simd
        for (long long i = 0; i < n; ++i) y[i] = (x[i] - mean) * rstd * w[i];
    } else if (b) {
        #pragma omp simd
        for (long long i = 0; i < n; ++i) y[i] = (x[i] - mean) * rstd + b[i];
    } else {
        #pragma omp simd
        for (long long i = 0; i < n; ++i) y[i] = (x[i] - mean) * rstd;
    }
}

// w and b may be NULL (no weight, no bias). n >= 1.
void layer_norm_fwd(const float *x, const float *w, const float *b, float *y, float *mean, float *rstd,
                    long long rows, long long n, long long x_stride, float eps, int threads) {
    // below ~16k elements a parallel region (a few microseconds) costs more than it saves
    #pragma omp parallel for num_threads(threads) schedule(static) if (rows * n >= 16384)
    for (long long r = 0; r < rows; ++r) {
        const float *xr = x + r * x_stride;
        double s1, s2;
        shifted_sums(xr, n, xr[0], &s1, &s2);
        double shift = s1 / n;
        double var = s2 / n - shift * shift;
        if (var < 0.0) var = 0.0;  // rounding may leave a tiny negative; NaN stays NaN (the test is false)
        float m = var != var ? NAN : (float)(xr[0] + shift);
        float rs = (float)(1.0 / sqrt(var + eps));
        mean[r] = m;
        rstd[r] = rs;
        normalise(xr, w, b, y + r * n, n, m, rs);
    }
}
