// max with its index over the middle dim of a contiguous (outer, reduced, inner) float array:
// values[a * inner + b] = max_r x[(a * reduced + r) * inner + b], indices the first r holding it; a NaN
// is the max and its index the first NaN's (torch's rule). No -ffast-math: `v != v` tests for NaN.
//
// Rows (inner == 1): blocks of BLOCK elements, each one vectorised pass that takes its max and whether it
// holds a NaN; the first block whose max exceeds every earlier block's (or holding a NaN, which ends the
// scan) is scanned again, from L1, for the first element equal to it. Columns (inner > 1): tiles of TILE
// columns, a running (value, index) per column updated row by row in vector lanes.
// Threads: whole rows or column tiles each when there are enough; else each row (tile) is split across
// the threads and the partial results merged in thread order, so a result never depends on scheduling.
#include <math.h>
#include <stddef.h>

#define BLOCK 256  // a block's rescan reads 1 KB, from L1
#define TILE 256   // columns one thread updates at once: 1 KB of values, 2 KB of indices

static long long min_ll(long long a, long long b) { return a < b ? a : b; }

// Whether (v, at) replaces (best, best_at) when merging results of spans in increasing order.
static int takes(float v, float best) { return v > best || (v != v && best == best); }

// The max of x[0..n) (n >= 1) and its first index, NaN first.
static void span_max(const float *restrict x, long long n, float *value, long long *index) {
    float best = -INFINITY;
    long long best_lo = -1;  // the block holding the first occurrence of the max so far
    for (long long lo = 0; lo < n; lo += BLOCK) {
        long long hi = min_ll(lo + BLOCK, n);
        float m = -INFINITY;
        int nan = 0;
        #pragma omp simd reduction(max:m) reduction(|:nan)
        for (long long i = lo; i < hi; ++i) {
            m = x[i] > m ? x[i] : m;
            nan |= x[i] != x[i];
        }
        if (nan) {
            long long i = lo;
            while (x[i] == x[i]) ++i;
            *value = x[i];
            *index = i;
            return;
        }
        if (m > best || best_lo < 0) {
            best = m;
            best_lo = lo;
        }
    }
    long long i = best_lo;
    while (x[i] != best) ++i;  // the block holds it
    *value = best;
    *index = i;
}

// value[b], index[b] for b in [0, width): the max over rows [r0, r1) (r1 > r0) of column b0 + b of plane a.
static void columns_max(const float *restrict x, long long a, long long reduced, long long inner, long long r0,
                        long long r1, long long b0, long long width, float *restrict value,
                        long long *restrict index) {
    const float *restrict first = x + (a * reduced + r0) * inner + b0;
    for (long long b = 0; b < width; ++b) {
        value[b] = first[b];
        index[b] = r0;
    }
    for (long long r = r0 + 1; r < r1; ++r) {
        const float *restrict row = x + (a * reduced + r) * inner + b0;
        #pragma omp simd
        for (long long b = 0; b < width; ++b) {
            float v = row[b];
            int take = v > value[b] || (v != v && value[b] == value[b]);
            value[b] = take ? v : value[b];
            index[b] = take ? r : index[b];
        }
    }
}

static void split_range(long long n, int parts, int t, long long *lo, long long *hi) {
    long long step = (n + parts - 1) / parts;
    *lo = min_ll((long long)t * step, n);
    *hi = min_ll(*lo + step, n);
}

// inner == 1. part_v / part_i hold `threads` entries each.
void max_rows(const float *x, float *values, long long *indices, long long outer, long long reduced,
              int threads, float *part_v, long long *part_i) {
    if (outer >= threads || reduced < 16384) {
        // below ~32k elements a parallel region (a few microseconds) costs more than it saves
        #pragma omp parallel for num_threads(threads) schedule(static) if (outer * reduced >= 32768)
        for (long long a = 0; a < outer; ++a) span_max(x + a * reduced, reduced, values + a, indices + a);
        return;
    }
    #pragma omp parallel num_threads(threads)
    {
        for (long long a = 0; a < outer; ++a) {
            #pragma omp for schedule(static, 1)
            for (int t = 0; t < threads; ++t) {
                long long lo, hi;
                split_range(reduced, threads, t, &lo, &hi);
                part_i[t] = -1;  // an empty span (more threads than elements) takes no part
                if (hi > lo) {
                    span_max(x + a * reduced + lo, hi - lo, part_v + t, part_i + t);
                    part_i[t] += lo;
                }
            }  // implicit barrier: every partial is written
            #pragma omp single
            {
                float best = part_v[0];
                long long at = part_i[0];
                for (int t = 1; t < threads; ++t) {
                    if (part_i[t] >= 0 && takes(part_v[t], best)) {
                        best = part_v[t];
                        at = part_i[t];
                    }
                }
                values[a] = best;
                indices[a] = at;
            }  // implicit barrier: partials are not overwritten while being read
        }
    }
}

// inner > 1. When outer * ceil(inner / TILE) < threads the reduced dim is split across the threads:
// part_v / part_i then hold threads * outer * inner entries each (else they are not used).
void max_cols(const float *x, float *values, long long *indices, long long outer, long long reduced,
              long long inner, int threads, float *part_v, long long *part_i) {
    long long tiles = (inner + TILE - 1) / TILE, units = outer * tiles;
    if (units >= threads || reduced < 64) {
        #pragma omp parallel for num_threads(threads) schedule(static) if (outer * reduced * inner >= 32768)
        for (long long u = 0; u < units; ++u) {
            long long a = u / tiles, b0 = u % tiles * TILE;
            columns_max(x, a, reduced, inner, 0, reduced, b0, min_ll(TILE, inner - b0), values + a * inner + b0,
                        indices + a * inner + b0);
        }
        return;
    }
    long long outputs = outer * inner;
    #pragma omp parallel num_threads(threads)
    {
        // threads <= reduced / 64 here, so every thread's span of rows is non-empty
        #pragma omp for schedule(static, 1)
        for (int t = 0; t < threads; ++t) {
            long long lo, hi;
            split_range(reduced, threads, t, &lo, &hi);
            for (long long u = 0; u < units; ++u) {
                long long a = u / tiles, b0 = u % tiles * TILE, at = t * outputs + a * inner + b0;
                columns_max(x, a, reduced, inner, lo, hi, b0, min_ll(TILE, inner - b0), part_v + at, part_i + at);
            }
        }  // implicit barrier
        #pragma omp for schedule(static)
        for (long long o = 0; o < outputs; ++o) {
            float best = part_v[o];
            long long at = part_i[o];
            for (int t = 1; t < threads; ++t) {
                if (takes(part_v[t * outputs + o], best)) {
                    best = part_v[t * outputs + o];
                    at = part_i[t * outputs + o];
                }
            }
            values[o] = best;
            indices[o] = at;
        }
    }
}
