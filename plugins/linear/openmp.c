// y (M×N) = act(x (M×K) · wᵀ (K×N) + bias) on the shared GEMM core: x and w read through their strides
// (transposed, sliced or expanded views need no copy), the bias and the activation applied in the epilogue.
// With z (the pre-activation asked for), the GEMM stores z and one pass makes y = act(z) from it.
#include "../_gemm/gemm_openmp.h"

int linear(const float *x, i64 sxm, i64 sxk, const float *w, i64 swn, i64 swk, const float *bias, float *y,
           i64 m, i64 n, i64 k, i64 mc, i64 nc, i64 kc, int threads, int act, float *z) {
    const i64 ad[D_FIELDS] = {[D_KIND] = STRIDED, [D_S0] = sxm, [D_S1] = sxk};
    const i64 bd[D_FIELDS] = {[D_KIND] = STRIDED, [D_S0] = swk, [D_S1] = swn};  // B(k, j) = w[j][k]
    if (z == NULL) return gemm_activated(1, m, n, k, x, ad, w, bd, y, n, 0, 0, NULL, bias, mc, nc, kc, threads, act);
    int rc = gemm(1, m, n, k, x, ad, w, bd, z, n, 0, 0, NULL, bias, mc, nc, kc, threads);
#pragma omp parallel for num_threads(threads) if (m * n >= PARALLEL_MIN_CALLS) schedule(static)
    for (i64 i = 0; i < m; ++i) kz_activate_n(z + i * n, y + i * n, n, act);
    return rc;
}
