// layer_norm backward over the rows of (rows, n) float matrices dy and x (column stride 1, rows dy_stride and
// x_stride apart); dx contiguous. Per row, with x_hat = (x - mean) * rstd and g = dy * w (dy without w):
//   pass 1: c1 = mean(g), c2 = mean(g * x_hat)      pass 2: dx = rstd * (g - c1 - x_hat * c2)
// (the row read twice: the second time from cache). Each thread takes a contiguous range of rows and adds
// dy * x_hat and dy into its own partial dw and db rows (float, flushed into doubles every FLUSH rows: long
// float accumulations drift), two rows per pass over the partials (one row per pass took 4.5 ms at
// 2048 x 2048 on one core, as long as torch's kernel); then the threads' partials are added in thread order
// (deterministic for a thread count). Partial sums within a row use float chunks of CHUNK gathered in doubles.
#include <omp.h>
#include <string.h>

#define CHUNK 1024
#define FLUSH 64

static long long min_ll(long long a, long long b) { return a < b ? a : b; }

// (c1, c2) = (mean of g, mean of g * x_hat) over the row.
static void row_means(const float *restrict dy, const float *restrict x, const float *restrict w, long long n,
                      float m, float rs, float *c1, float *c2) {
    double t1 = 0.0, t2 = 0.0;
    for (long long lo = 0; lo < n; lo += CHUNK) {
        long long hi = min_ll(lo + CHUNK, n);
        float a = 0.0f, b = 0.0f;
        if (w) {
            #pragma omp simd reduction(+:a, b)
            for (long long i = lo; i < hi; ++i) {
                float g = dy[i] * w[i];
                a += g;
                b += g * ((x[i] - m) * rs);
            }
        } else {
            #pragma omp simd reduction(+:a, b)
            for (long long i = lo; i < hi; ++i) {
                a += dy[i];
                b += dy[i] * ((x[i] - m) * rs);
            }
        }
        t1 += a;
        t2 += b;
    }
    *c1 = (float)(t1 / n);
    *c2 = (float)(t2 / n);
}

static void flush(float *restrict pw, float *restrict pb, double *restrict aw, double *restrict ab, long long n) {
    for (long long i = 0; i < n; ++i) {
        aw[i] += pw[i];
        ab[i] += pb[i];
        pw[i] = 0.0f;
        pb[i] = 0.0f;
    }
}

// Pass 2 for rows a and b (b may equal a, then its terms are not added twice): dx of both, and their
// dy * x_hat and dy added into the thread's partial rows — two rows per read-modify-write of the partials.
static void rows_pass2(const float *restrict dya, const float *restrict xa, float *restrict dxa, float ma, float rsa,
                       float c1a, float c2a, const float *restrict dyb, const float *restrict xb,
                       float *restrict dxb, float mb, float rsb, float c1b, float c2b, const float *restrict w,
                       long long n, int two, float *restrict pw, float *restrict pb) {
    const float kb = two ? 1.0f : 0.0f;  // the second row's share of the partial sums
    if (w) {
        #pragma omp simd
        for (long long i = 0; i < n; ++i) {
            const float xha = (xa[i] - ma) * rsa, xhb = (xb[i] - mb) * rsb;
            dxa[i] = rsa * (dya[i] * w[i] - c1a - xha * c2a);
            dxb[i] = rsb * (dyb[i] * w[i] - c1b - xhb * c2b);
            pw[i] += dya[i] * xha + kb * (dyb[i] * xhb);
            pb[i] += dya[i] + kb * dyb[i];
        }
    } else {
        #pragma omp simd
        for (long long i = 0; i < n; ++i) {
            const float xha = (xa[i] - ma) * rsa, xhb = (xb[i] - mb) * rsb;
            dxa[i] = rsa * (dya[i] - c1a - xha * c2a);
            dxb[i] = rsb * (dyb[i] - c1b - xhb * c2b);
            pw[i] += dya[i] * xha + kb * (dyb[i] * xhb);
            pb[i] += dya[i] + kb * dyb[i];
        }
    }
}

// w may be NULL. partial: 2 * threads * n floats; acc: 2 * threads * n doubles. n >= 1.
void layer_norm_bwd(const float *dy, const float *x, const float *mean, const float *rstd, const float *w,
                    float *dx, float *dw, float *db, long long rows, long long n, long long dy_stride,
                    long long x_stride, int threads, float *partial, double *acc) {
    #pragma omp parallel num_threads(threads) if (rows * n >= 16384)
    {
        const int t = omp_get_thread_num(), team = omp_get_num_threads();
        float *pw = partial + (long long)t * 2 * n, *pb = pw + n;
        double *aw = acc + (long long)t * 2 * n, *ab = aw + n;
        memset(pw, 0, 2 * n * sizeof(float));
        memset(aw, 0, 2 * n * sizeof(double));
        const long long step = (rows + team - 1) / team;
        const long long lo = min_ll(t * step, rows), hi = min_ll(lo + step, rows);
        for (long long r = lo; r < hi; r += 2) {
            const long long s = r + 1 < hi ? r + 1 : r;  // the pair's second row (the first again at an odd end)
            float c1a, c2a, c1b, c2b;
            row_means(dy + r * dy_stride, x + r * x_stride, w, n, mean[r], rstd[r], &c1a, &c2a);
            row_means(dy + s * dy_stride, x + s * x_stride, w, n, mean[s], rstd[s], &c1b, &c2b);
            rows_pass2(dy + r * dy_stride, x + r * x_stride, dx + r * n, mean[r], rstd[r], c1a, c2a,
                       dy + s * dy_stride, x + s * x_stride, dx + s * n, mean[s], rstd[s], c1b, c2b, w, n, s != r,
                       pw, pb);
            if ((r - lo) % FLUSH == FLUSH - 2) flush(pw, pb, aw, ab, n);
        }
        flush(pw, pb, aw, ab, n);
        #pragma omp barrier
        #pragma omp for schedule(static)
        for (long long i = 0; i < n; ++i) {
            double sw = 0.0, sb = 0.0;
            for (int k = 0; k < team; ++k) {
                sw += acc[(long long)k * 2 * n + i];
                sb += acc[(long long)k * 2 * n + n + i];
            }
            dw[i] = (float)sw;
            db[i] = (float)sb;
        }
    }
}
