// embedding forward: out[i, :] = w[idx[i], :] for i < n; the table's rows w_stride apart (column stride 1),
// out contiguous. Indices are int64 (idx64) or int32 (idx32; the other pointer is NULL). Rows in parallel,
// each a memcpy: the copy is the whole op.
#include <string.h>

void embedding_fwd(const float *w, const long long *idx64, const int *idx32, float *out, long long n, long long dim,
                   long long w_stride, int threads) {
    // below ~64 KB copied a parallel region (a few microseconds) costs more than it saves
    #pragma omp parallel for num_threads(threads) schedule(static) if (n * dim >= 16384)
    for (long long i = 0; i < n; ++i) {
        const long long row = idx64 ? idx64[i] : (long long)idx32[i];
        memcpy(out + i * dim, w + row * w_stride, dim * sizeof(float));
    }
}
