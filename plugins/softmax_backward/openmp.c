// softmax's gradient over the rows of (rows, cols) float matrices grad and y (column stride 1, rows
// g_stride and y_stride apart); dx is contiguous: dx = y * (grad - s), s = sum of grad * y over the row.
//
// Two passes per row: the dot product s (vectorised, float lanes of at most CHUNK terms gathered in a
// double: a 1M-element row stays at float rounding), then dx; the second pass re-reads the row from cache
// for rows up to about the L2. NaN and inf follow the formula (no -ffast-math).
#include "../_openmp/parallel.h"
#include <stddef.h>

#define CHUNK 4096

static long long min_ll(long long a, long long b) { return a < b ? a : b; }

static double dot(const float *restrict g, const float *restrict y, long long n) {
    double total = 0.0;
    for (long long lo = 0; lo < n; lo += CHUNK) {
        long long hi = min_ll(lo + CHUNK, n);
        float s = 0.0f;
        #pragma omp simd reduction(+:s)
        for (long long i = lo; i < hi; ++i) s += g[i] * y[i];
        total += s;
    }
    return total;
}

static void write_dx(const float *restrict g, const float *restrict y, float *restrict dx, long long n, float s) {
    #pragma omp simd
    for (long long i = 0; i < n; ++i) dx[i] = y[i] * (g[i] - s);
}

// Rows in parallel, a row each.
void softmax_backward_rows(const float *g, const float *y, float *dx, long long rows, long long cols,
                           long long g_stride, long long y_stride, int threads) {
    // below ~16k elements a parallel region (a few microseconds) costs more than it saves
    #pragma omp parallel for num_threads(threads) schedule(static) if (rows * cols >= 16384)
    for (long long r = 0; r < rows; ++r) {
        const float *gr = g + r * g_stride, *yr = y + r * y_stride;
        write_dx(gr, yr, dx + r * cols, cols, (float)dot(gr, yr, cols));
    }
}

// Each row split across the threads (for few, long rows): every thread takes the dot product of its
// chunk, then all add the partials in thread order (the same sum on every thread) and write their
// chunks. `partial` holds `threads` doubles.
void softmax_backward_split(const float *g, const float *y, float *dx, long long rows, long long cols,
                            long long g_stride, long long y_stride, int threads, double *partial) {
    // chunks of whole 64-byte lines, so that no two threads write one cache line of dx
    long long chunk = ((cols + threads - 1) / threads + 15) / 16 * 16;
    // the omp for loops below hand the `threads` chunks to whatever team runs: one thread when small
    #pragma omp parallel num_threads(threads) if (rows * cols >= PARALLEL_MIN)
    {
        for (long long r = 0; r < rows; ++r) {
            const float *gr = g + r * g_stride, *yr = y + r * y_stride;
            #pragma omp for schedule(static, 1)
            for (int t = 0; t < threads; ++t) {
                long long lo = min_ll(t * chunk, cols), hi = min_ll(lo + chunk, cols);
                partial[t] = dot(gr + lo, yr + lo, hi - lo);
            }  // implicit barrier: every partial is written
            double s = 0.0;
            for (int t = 0; t < threads; ++t) s += partial[t];
            #pragma omp for schedule(static, 1)
            for (int t = 0; t < threads; ++t) {
                long long lo = min_ll(t * chunk, cols), hi = min_ll(lo + chunk, cols);
                write_dx(gr + lo, yr + lo, dx + r * cols + lo, hi - lo, (float)s);
            }  // implicit barrier: the partials are not overwritten while another thread reads them
        }
    }
}
