// embedding backward: out[v, :] = sum of g[i, :] over the positions i with idx[i] = v (0 for v = padding_idx,
// and for rows never indexed); g's rows g_stride apart (column stride 1), out contiguous (num_weights, dim).
// Indices are int64 (idx64) or int32 (idx32; the other pointer is NULL).
//
// Deterministic, without atomics: a counting sort (one pass to count, a prefix sum, one pass to place; stable)
// lists each row's positions in increasing order; then table rows go in parallel, each written once by one
// thread, which adds its positions' gradient rows in that order. Every row of the table is written once, so
// no zero-fill pass is needed. starts: num_weights + 1, next: num_weights, order: n (scratch).
#include <string.h>

void embedding_bwd(const float *g, long long g_stride, const long long *idx64, const int *idx32, float *out,
                   long long n, long long dim, long long num_weights, long long padding_idx, int threads,
                   long long *starts, long long *next, long long *order) {
    memset(starts, 0, (num_weights + 1) * sizeof(long long));
    for (long long i = 0; i < n; ++i) starts[(idx64 ? idx64[i] : idx32[i]) + 1] += 1;
    for (long long v = 0; v < num_weights; ++v) starts[v + 1] += starts[v];
    memcpy(next, starts, num_weights * sizeof(long long));
    for (long long i = 0; i < n; ++i) order[next[idx64 ? idx64[i] : idx32[i]]++] = i;
    // rows are uneven (some indexed many times, most never): chunks of 64 rows handed out dynamically
    #pragma omp parallel for num_threads(threads) schedule(dynamic, 64) if (num_weights * dim >= 16384)
    for (long long v = 0; v < num_weights; ++v) {
        float *restrict o = out + v * dim;
        const long long lo = starts[v], hi = starts[v + 1];
        if (v == padding_idx || lo == hi) {
            memset(o, 0, dim * sizeof(float));
            continue;
        }
        memcpy(o, g + order[lo] * g_stride, dim * sizeof(float));
        for (long long p = lo + 1; p < hi; ++p) {
            const float *restrict row = g + order[p] * g_stride;
            #pragma omp simd
            for (long long d = 0; d < dim; ++d) o[d] += row[d];
        }
    }
}
