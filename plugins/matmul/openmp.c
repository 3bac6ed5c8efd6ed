// matmul on the shared GEMM core (../_gemm/gemm_openmp.h): C[b] (M×N) = A[b] (M×K) · B[b] (K×N) for every
// batch b, A and B read through their strides (a batch stride of 0 broadcasts one matrix over the batch), C
// contiguous. Returns 0, or -1 when the packing buffers cannot be allocated.
#include "../_gemm/gemm_openmp.h"

int matmul(const float *a, const float *b, float *c, i64 batch, i64 m, i64 n, i64 k, i64 sab, i64 sam, i64 sak,
           i64 sbb, i64 sbk, i64 sbn, i64 mc, i64 nc, i64 kc, int threads) {
    const i64 ad[D_FIELDS] = {[D_KIND] = STRIDED, [D_BATCH] = sab, [D_S0] = sam, [D_S1] = sak};
    const i64 bd[D_FIELDS] = {[D_KIND] = STRIDED, [D_BATCH] = sbb, [D_S0] = sbk, [D_S1] = sbn};
    return gemm(batch, m, n, k, a, ad, b, bd, c, n, m * n, 0, NULL, NULL, mc, nc, kc, threads);
}
