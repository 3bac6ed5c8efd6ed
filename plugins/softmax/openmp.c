// softmax over the rows of a (rows, cols) float matrix: column stride 1, rows x_stride apart;
// the output is contiguous.
//
// Three passes per row: max; y = exp(x - max) with its sum; y *= 1 / sum. Passes two and three
// re-read the row from cache, and each element costs one exp. The alternative, an online max and
// rescaled sum then y = exp(x - max) / sum, streams the row one time less but costs two exps per
// element, and on a CPU core the exp is the bottleneck, not memory: 3 passes beat 2 even for rows far
// beyond the L3.
//
// NaN and inf follow torch: the max ignores NaN (x > m is false) but exp(NaN - m) makes the sum
// NaN; a row max of +inf gives inf - inf = NaN, a row of only -inf gives -inf - -inf = NaN.
#include "../_openmp/parallel.h"
#include "../_openmp/softmax_rows.h"
#include <stddef.h>

// y = exp(x - m) for x[0..n); returns the sum.
static float exp_store_sum(const float *restrict x, float *restrict y, long long n, float m) {
    float s = 0.0f;
    #pragma omp simd reduction(+:s)
    for (long long i = 0; i < n; ++i) {
        float e = exp_nonpositive(x[i] - m);
        y[i] = e;
        s += e;
    }
    return s;
}

static void scale(float *restrict y, long long n, float a) {
    #pragma omp simd
    for (long long i = 0; i < n; ++i) y[i] *= a;
}

// 16 short rows at once, row l in lane l (one AVX-512 vector): a row alone is a chain of
// dependent steps (max, exp, sum, divide; ~40 ns whatever its length), 16 side by side fill
// the vector units instead. Measured on Zen 4, one thread: 17 columns 13 vs 58 ns per row,
// 63 columns 47 vs 98 ns; at 64 or 128 columns whole rows are faster (33 vs 47, 57 vs 96 ns).
#define KZ_LANES 16
#define KZ_SHORT_MAX 128  // the longest row this path takes: 8 KiB of buffer on the stack

static void softmax_16_rows(const float *restrict x, float *restrict y, long long cols,
                            long long x_stride) {
    float t[KZ_SHORT_MAX][KZ_LANES], m[KZ_LANES], s[KZ_LANES];
    for (long long c = 0; c < cols; ++c) {
        #pragma omp simd
        for (int l = 0; l < KZ_LANES; ++l) t[c][l] = x[l * x_stride + c];
    }
    #pragma omp simd
    for (int l = 0; l < KZ_LANES; ++l) {
        m[l] = -INFINITY;
        s[l] = 0.0f;
    }
    for (long long c = 0; c < cols; ++c) {
        #pragma omp simd
        for (int l = 0; l < KZ_LANES; ++l) m[l] = t[c][l] > m[l] ? t[c][l] : m[l];
    }
    for (long long c = 0; c < cols; ++c) {
        #pragma omp simd
        for (int l = 0; l < KZ_LANES; ++l) {
            t[c][l] = exp_nonpositive(t[c][l] - m[l]);
            s[l] += t[c][l];
        }
    }
    #pragma omp simd
    for (int l = 0; l < KZ_LANES; ++l) s[l] = 1.0f / s[l];
    for (long long c = 0; c < cols; ++c) {
        #pragma omp simd
        for (int l = 0; l < KZ_LANES; ++l) y[l * cols + c] = t[c][l] * s[l];
    }
}

static void softmax_row(const float *restrict x, float *restrict y, long long cols) {
    scale(y, cols, 1.0f / exp_store_sum(x, y, cols, row_max(x, cols)));
}

// Rows in parallel: each row by one thread, or rows shorter than short_cols 16 at a time.
void softmax_rows(const float *x, float *y, long long rows, long long cols, long long x_stride,
                  long long short_cols, int threads) {
    // below ~16k elements a parallel region (a few microseconds) costs more than it saves
    int parallel = rows * cols >= 16384;
    long long done = 0;
    if (cols < short_cols && cols <= KZ_SHORT_MAX) {
        long long groups = rows / KZ_LANES;
        #pragma omp parallel for num_threads(threads) schedule(static) if (parallel)
        for (long long g = 0; g < groups; ++g)
            softmax_16_rows(x + g * KZ_LANES * x_stride, y + g * KZ_LANES * cols, cols, x_stride);
        done = groups * KZ_LANES;  // the last rows % 16 rows, one by one on this thread
    }
    #pragma omp parallel for num_threads(threads) schedule(static) if (parallel && done == 0)
    for (long long r = done; r < rows; ++r) softmax_row(x + r * x_stride, y + r * cols, cols);
}

// Each row split across the threads (for few, long rows): every thread takes the max m_t and
// sum s_t of its chunk, writing y = exp(x - m_t); then all merge the partials into the row's max
// M and sum S = sum_t s_t exp(m_t - M), and scale their chunks by exp(m_t - M) / S.
// A chunk of only -inf subtracts 0 instead of m_t = -inf, so that its exps are 0, not NaN;
// the row's M = -inf still makes every element NaN through exp(-inf - M).
// `partial` holds 2 * threads floats.
void softmax_split(const float *x, float *y, long long rows, long long cols, long long x_stride,
                   int threads, float *partial) {
    float *part_m = partial, *part_s = partial + threads;
    // chunks of whole 64-byte lines, so that no two threads write one cache line
    long long chunk = ((cols + threads - 1) / threads + 15) / 16 * 16;
    // the omp for loops below hand the `threads` chunks to whatever team runs: one thread when small
    #pragma omp parallel num_threads(threads) if (rows * cols >= PARALLEL_MIN)
    {
        for (long long r = 0; r < rows; ++r) {
            const float *xr = x + r * x_stride;
            float *yr = y + r * cols;
            #pragma omp for schedule(static, 1)
            for (int t = 0; t < threads; ++t) {
                long long lo = t * chunk < cols ? t * chunk : cols;
                long long hi = lo + chunk < cols ? lo + chunk : cols;
                float m = row_max(xr + lo, hi - lo);
                part_m[t] = m;
                part_s[t] = exp_store_sum(xr + lo, yr + lo, hi - lo, m == -INFINITY ? 0.0f : m);
            }  // implicit barrier: every partial is written
            float big = -INFINITY, sum = 0.0f;
            for (int t = 0; t < threads; ++t) big = part_m[t] > big ? part_m[t] : big;
            for (int t = 0; t < threads; ++t) sum += part_s[t] * exp_nonpositive(part_m[t] - big);
            #pragma omp for schedule(static, 1)
            for (int t = 0; t < threads; ++t) {
                long long lo = t * chunk < cols ? t * chunk : cols;
                long long hi = lo + chunk < cols ? lo + chunk : cols;
                scale(yr + lo, hi - lo, exp_nonpositive(part_m[t] - big) / sum);
            }  // implicit barrier: the partials are not overwritten while another thread reads them
        }
    }
}
