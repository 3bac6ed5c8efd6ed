// sum (and mean: scale = 1/reduced) over the middle dim of a contiguous (outer, reduced, inner) float
// array: out[a * inner + b] = scale * sum_r x[(a * reduced + r) * inner + b].
//
// Accuracy: a float accumulator takes at most CHUNK terms (vectorised: 8 or 16 lanes of CHUNK / lanes
// each), then its sum goes into a double. Long float accumulations drift: 4M unit-normal terms in 8
// lanes are off by ~6e-8 * 500k; chunked, by ~6e-8 * 1k.
// Threads: whole rows or column tiles each when there are enough of them; else each row (column tile)
// is split across the threads and the partials are added in thread order, so a result depends on the
// thread count but not on scheduling.
#include <stddef.h>

#define CHUNK 4096
#define TILE 256  // columns one thread accumulates at once: 1 KB of floats, 2 KB of doubles

static long long min_ll(long long a, long long b) { return a < b ? a : b; }

static double sum_span(const float *restrict x, long long n) {
    double total = 0.0;
    for (long long lo = 0; lo < n; lo += CHUNK) {
        long long hi = min_ll(lo + CHUNK, n);
        float s = 0.0f;
        #pragma omp simd reduction(+:s)
        for (long long i = lo; i < hi; ++i) s += x[i];
        total += s;
    }
    return total;
}

// acc[0..b1-b0) = sum over r in [r0, r1) of x[(a * reduced + r) * inner + b] for b in [b0, b1).
static void sum_columns(const float *restrict x, long long a, long long reduced, long long inner,
                        long long r0, long long r1, long long b0, long long b1, double *restrict acc) {
    float part[TILE];
    long long width = b1 - b0;
    for (long long b = 0; b < width; ++b) acc[b] = 0.0;
    for (long long lo = r0; lo < r1; lo += CHUNK / TILE * 4) {  // 64 rows per float accumulation
        long long hi = min_ll(lo + CHUNK / TILE * 4, r1);
        for (long long b = 0; b < width; ++b) part[b] = 0.0f;
        for (long long r = lo; r < hi; ++r) {
            const float *restrict row = x + (a * reduced + r) * inner + b0;
            #pragma omp simd
            for (long long b = 0; b < width; ++b) part[b] += row[b];
        }
        for (long long b = 0; b < width; ++b) acc[b] += part[b];
    }
}

static void split_range(long long n, int parts, int t, long long *lo, long long *hi) {
    long long step = (n + parts - 1) / parts;
    *lo = min_ll((long long)t * step, n);
    *hi = min_ll(*lo + step, n);
}

// inner == 1: one row per output. `partial` holds `threads` doubles.
void sum_rows(const float *x, float *out, long long outer, long long reduced, float scale, int threads,
              double *partial) {
    if (outer >= threads || reduced < 4 * CHUNK) {
        // below ~32k elements a parallel region (a few microseconds) costs more than it saves
        #pragma omp parallel for num_threads(threads) schedule(static) if (outer * reduced >= 32768)
        for (long long a = 0; a < outer; ++a) out[a] = (float)(sum_span(x + a * reduced, reduced) * scale);
        return;
    }
    #pragma omp parallel num_threads(threads)
    {
        for (long long a = 0; a < outer; ++a) {
            #pragma omp for schedule(static, 1)
            for (int t = 0; t < threads; ++t) {
                long long lo, hi;
                split_range(reduced, threads, t, &lo, &hi);
                partial[t] = sum_span(x + a * reduced + lo, hi - lo);
            }  // implicit barrier: every partial is written
            #pragma omp single
            {
                double s = 0.0;
                for (int t = 0; t < threads; ++t) s += partial[t];
                out[a] = (float)(s * scale);
            }  // implicit barrier: partials are not overwritten while being read
        }
    }
}

// inner > 1: column tiles of TILE outputs. `partial` holds threads * outer * inner doubles when
// outer * ceil(inner / TILE) < threads (then the reduced dim is split across the threads), else nothing.
void sum_cols(const float *x, float *out, long long outer, long long reduced, long long inner, float scale,
              int threads, double *partial) {
    long long tiles = (inner + TILE - 1) / TILE, units = outer * tiles;
    if (units >= threads || reduced < 64) {
        #pragma omp parallel for num_threads(threads) schedule(static) if (outer * reduced * inner >= 32768)
        for (long long u = 0; u < units; ++u) {
            double acc[TILE];
            long long a = u / tiles, b0 = u % tiles * TILE, b1 = min_ll(b0 + TILE, inner);
            sum_columns(x, a, reduced, inner, 0, reduced, b0, b1, acc);
            for (long long b = b0; b < b1; ++b) out[a * inner + b] = (float)(acc[b - b0] * scale);
        }
        return;
    }
    long long outputs = outer * inner;
    #pragma omp parallel num_threads(threads)
    {
        int t = 0;
        #pragma omp for schedule(static, 1)
        for (t = 0; t < threads; ++t) {
            long long lo, hi;
            split_range(reduced, threads, t, &lo, &hi);
            for (long long u = 0; u < units; ++u) {
                long long a = u / tiles, b0 = u % tiles * TILE, b1 = min_ll(b0 + TILE, inner);
                sum_columns(x, a, reduced, inner, lo, hi, b0, b1, partial + t * outputs + a * inner + b0);
            }
        }  // implicit barrier
        #pragma omp for schedule(static)
        for (long long i = 0; i < outputs; ++i) {
            double s = 0.0;
            for (int k = 0; k < threads; ++k) s += partial[k * outputs + i];
            out[i] = (float)(s * scale);
        }
    }
}
