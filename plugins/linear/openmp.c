// y (M×N) = x (M×K) · wᵀ (K×N) + bias on the shared GEMM core: x and w read through their strides
// (transposed, sliced or expanded views need no copy), the bias added per column in the epilogue.
#include "../_gemm/gemm_openmp.h"

int linear(const float *x, i64 sxm, i64 sxk, const float *w, i64 swn, i64 swk, const float *bias, float *y,
           i64 m, i64 n, i64 k, i64 mc, i64 nc, i64 kc, int threads) {
    const i64 ad[D_FIELDS] = {[D_KIND] = STRIDED, [D_S0] = sxm, [D_S1] = sxk};
    const i64 bd[D_FIELDS] = {[D_KIND] = STRIDED, [D_S0] = swk, [D_S1] = swn};  // B(k, j) = w[j][k]
    return gemm(1, m, n, k, x, ad, w, bd, y, n, 0, 0, NULL, bias, mc, nc, kc, threads);
}
