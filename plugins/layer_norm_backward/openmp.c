// layer_norm backward over the rows of (rows, n) float matrices dy and x (column stride 1, rows dy_stride and
// x_stride apart); dx contiguous. Per row, with x_hat = (x - mean) * rstd and g = dy * w (dy without w):
//   pass 1: c1 = mean(g), c2 = mean(g * x_hat)      pass 2: dx = rstd * (g - c1 - x_hat * c2)
// Each thread takes a contiguous range of rows, two at a time: pass 1 of the pair reads it from memory, pass 2
// again from cache, and adds dy * x_hat and dy into the thread's own partial dw and db rows (float, flushed
// into doubles every FLUSH rows: long float accumulations drift), two rows per pass over the partials (one
// row per pass was as slow as torch's kernel); then the threads' partials
// are added in thread order (deterministic for a thread count). Sums within a row: float chunks of CHUNK
// gathered in doubles.
//
// Two choices (figures in docs/design/rows.md):
// - pass 2 prefetches the next pair's rows into L2: without it a pair's first read waits on memory with
//   nothing else to do, and pass 2 computes with no read from memory in flight. Doing pass 1 of the next pair
//   in the same loop as pass 2 instead (fewer loads) was no faster.
// - dx is written with streaming (non-temporal) stores from stream_min elements on: a plain store first
//   reads the line it overwrites, 4 bytes of memory traffic more on 12 per element. Below that, dx and
//   the inputs fit in the L3 and dx stays there for whoever reads it next, which streaming would lose.
#include <omp.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#if defined(__AVX__)
#include <immintrin.h>
#endif

#define CHUNK 1024
#define FLUSH 64

typedef long long i64;
// 16 floats: one zmm register with AVX-512, two ymm with AVX
typedef float vf16 __attribute__((vector_size(64)));
typedef float vf16u __attribute__((vector_size(64), aligned(4)));

static i64 min_ll(i64 a, i64 b) { return a < b ? a : b; }

// dst[0..16) = v; a streaming store (dst 64-byte aligned) when `stream`.
static inline __attribute__((always_inline)) void put16(float *dst, vf16 v, const int stream) {
#if defined(__AVX512F__)
    if (stream) {
        _mm512_stream_ps(dst, (__m512)v);
        return;
    }
#elif defined(__AVX__)
    if (stream) {
        _mm256_stream_ps(dst, (__m256){v[0], v[1], v[2], v[3], v[4], v[5], v[6], v[7]});
        _mm256_stream_ps(dst + 8, (__m256){v[8], v[9], v[10], v[11], v[12], v[13], v[14], v[15]});
        return;
    }
#endif
    (void)stream;
    *(vf16u *)dst = v;
}

// (c1, c2) of rows a and b, one read of w for both: c = {c1a, c2a, c1b, c2b}.
static void pair_means(const float *restrict dya, const float *restrict xa, float ma, float rsa,
                       const float *restrict dyb, const float *restrict xb, float mb, float rsb,
                       const float *restrict w, i64 n, float *c) {
    double t[4] = {0.0, 0.0, 0.0, 0.0};
    for (i64 lo = 0; lo < n; lo += CHUNK) {
        const i64 hi = min_ll(lo + CHUNK, n);
        float a1 = 0.0f, a2 = 0.0f, b1 = 0.0f, b2 = 0.0f;
        #pragma omp simd reduction(+:a1, a2, b1, b2)
        for (i64 i = lo; i < hi; ++i) {
            const float wi = w ? w[i] : 1.0f;
            const float ga = dya[i] * wi, gb = dyb[i] * wi;
            a1 += ga;
            a2 += ga * ((xa[i] - ma) * rsa);
            b1 += gb;
            b2 += gb * ((xb[i] - mb) * rsb);
        }
        t[0] += a1, t[1] += a2, t[2] += b1, t[3] += b2;
    }
    for (int k = 0; k < 4; ++k) c[k] = (float)(t[k] / n);
}

static void flush(float *restrict pw, float *restrict pb, double *restrict aw, double *restrict ab, i64 n) {
    for (i64 i = 0; i < n; ++i) {
        aw[i] += pw[i];
        ab[i] += pb[i];
        pw[i] = 0.0f;
        pb[i] = 0.0f;
    }
}

typedef struct {
    const float *dy, *x;
    float *dx;
    float m, rs;
} Row;

// Pass 2 of rows a and b (kb = 0 when b repeats a at an odd end: its terms are not added twice): dx of both,
// and their dy * x_hat and dy added into the partial rows. Meanwhile the next pair's rows (p, q; 4 lines per
// 16 columns) are prefetched into L2. With `stream`, dx rows are 64-byte aligned and n a multiple of 16.
static inline __attribute__((always_inline)) void pair_pass2(Row a, const float *c, Row b, float kb,
                                                             const float *restrict w, i64 n, float *restrict pw,
                                                             float *restrict pb, Row p, Row q, const int stream) {
    const float c1a = c[0], c2a = c[1], c1b = c[2], c2b = c[3];
    i64 i = 0;
    for (; i + 16 <= n; i += 16) {
        __builtin_prefetch(p.dy + i, 0, 2);
        __builtin_prefetch(p.x + i, 0, 2);
        __builtin_prefetch(q.dy + i, 0, 2);
        __builtin_prefetch(q.x + i, 0, 2);
        const vf16 wv = w ? *(const vf16u *)(w + i) : (vf16){0} + 1.0f;
        const vf16 da = *(const vf16u *)(a.dy + i), db = *(const vf16u *)(b.dy + i);
        const vf16 xha = (*(const vf16u *)(a.x + i) - a.m) * a.rs, xhb = (*(const vf16u *)(b.x + i) - b.m) * b.rs;
        put16(a.dx + i, a.rs * (da * wv - c1a - xha * c2a), stream);
        put16(b.dx + i, b.rs * (db * wv - c1b - xhb * c2b), stream);
        *(vf16u *)(pw + i) += da * xha + kb * (db * xhb);
        *(vf16u *)(pb + i) += da + kb * db;
    }
    for (; i < n; ++i) {
        const float wi = w ? w[i] : 1.0f;
        const float xha = (a.x[i] - a.m) * a.rs, xhb = (b.x[i] - b.m) * b.rs;
        a.dx[i] = a.rs * (a.dy[i] * wi - c1a - xha * c2a);
        b.dx[i] = b.rs * (b.dy[i] * wi - c1b - xhb * c2b);
        pw[i] += a.dy[i] * xha + kb * (b.dy[i] * xhb);
        pb[i] += a.dy[i] + kb * b.dy[i];
    }
}

typedef struct {
    const float *dy, *x, *mean, *rstd, *w;
    float *dx;
    i64 n, dy_stride, x_stride;
} Args;

static Row row(const Args *g, i64 r) {
    return (Row){g->dy + r * g->dy_stride, g->x + r * g->x_stride, g->dx + r * g->n, g->mean[r], g->rstd[r]};
}

// Rows [lo, hi) into dx and the partial rows pw, pb (flushed into aw, ab).
static inline __attribute__((always_inline)) void rows_span(const Args *g, i64 lo, i64 hi, float *pw, float *pb,
                                                            double *aw, double *ab, const int stream) {
    const i64 n = g->n;
    for (i64 r = lo; r < hi; r += 2) {
        const i64 s = min_ll(r + 1, hi - 1);  // the pair's second row (the first again at an odd end)
        const i64 next = min_ll(r + 2, hi - 1), after = min_ll(r + 3, hi - 1);
        const Row a = row(g, r), b = row(g, s);
        float c[4];
        pair_means(a.dy, a.x, a.m, a.rs, b.dy, b.x, b.m, b.rs, g->w, n, c);
        pair_pass2(a, c, b, s != r ? 1.0f : 0.0f, g->w, n, pw, pb, row(g, next), row(g, after), stream);
        if ((r - lo) % FLUSH == FLUSH - 2) flush(pw, pb, aw, ab, n);
    }
}

// w may be NULL. dx is streamed when rows * n >= stream_min (and its rows are 64-byte aligned). n >= 1.
// Returns 0, or -1 when the partial rows cannot be allocated.
int layer_norm_bwd(const float *dy, const float *x, const float *mean, const float *rstd, const float *w,
                   float *dx, float *dw, float *db, long long rows, long long n, long long dy_stride,
                   long long x_stride, long long stream_min, int threads) {
    const Args g = {dy, x, mean, rstd, w, dx, n, dy_stride, x_stride};
#if defined(__AVX__)
    const int stream = rows * n >= stream_min && n % 16 == 0 && ((uintptr_t)dx & 63) == 0;
#else
    const int stream = 0;
    (void)stream_min;
#endif
    float *partial = malloc(sizeof(float) * 2 * (size_t)(threads * n));
    double *acc = malloc(sizeof(double) * 2 * (size_t)(threads * n));
    if (partial == NULL || acc == NULL) {
        free(partial);
        free(acc);
        return -1;
    }
    #pragma omp parallel num_threads(threads) if (rows * n >= 16384)
    {
        const int t = omp_get_thread_num(), team = omp_get_num_threads();
        float *pw = partial + (i64)t * 2 * n, *pb = pw + n;
        double *aw = acc + (i64)t * 2 * n, *ab = aw + n;
        memset(pw, 0, 2 * n * sizeof(float));
        memset(aw, 0, 2 * n * sizeof(double));
        const i64 step = (rows + team - 1) / team;
        const i64 lo = min_ll(t * step, rows), hi = min_ll(lo + step, rows);
        if (stream) {
#if defined(__AVX__)
            rows_span(&g, lo, hi, pw, pb, aw, ab, 1);
            _mm_sfence();  // streaming stores are weakly ordered: drain them before the barrier
#endif
        } else {
            rows_span(&g, lo, hi, pw, pb, aw, ab, 0);
        }
        flush(pw, pb, aw, ab, n);
        #pragma omp barrier
        #pragma omp for schedule(static)
        for (i64 i = 0; i < n; ++i) {
            double sw = 0.0, sb = 0.0;
            for (int k = 0; k < team; ++k) {
                sw += acc[(i64)k * 2 * n + i];
                sb += acc[(i64)k * 2 * n + n + i];
            }
            dw[i] = (float)sw;
            db[i] = (float)sb;
        }
    }
    free(partial);
    free(acc);
    return 0;
}
