// The gradients of linear on the shared GEMM core, every operand read through its strides:
//   dz (M×N) = g·act'(pre) (one pass, into a buffer; g itself without an activation);
//   grad_x (M×K) = dz (M×N) · w (N×K);  grad_w (N×K) = dzᵀ (N×M) · x (M×K);  grad_b (N) = column sums of dz.
#include "../_gemm/gemm_openmp.h"

// gb[j] = Σ_i g[i][j]: each thread owns a range of columns and adds the rows into it in order
// (deterministic; a row's range is contiguous when sgn is 1, so the adds vectorise).
static void column_sums(const float *g, i64 sgm, i64 sgn, float *gb, i64 m, i64 n, int threads) {
#pragma omp parallel num_threads(threads) if (m * n >= PARALLEL_MIN)
    {
        int t = omp_get_thread_num(), nt = omp_get_num_threads();
        i64 j0 = n * t / nt, j1 = n * (t + 1) / nt;
        for (i64 j = j0; j < j1; ++j) gb[j] = 0.0f;
        for (i64 i = 0; i < m; ++i) {
            const float *row = g + i * sgm;
            if (sgn == 1) {
#pragma omp simd
                for (i64 j = j0; j < j1; ++j) gb[j] += row[j];
            } else {
                for (i64 j = j0; j < j1; ++j) gb[j] += row[j * sgn];
            }
        }
    }
}

int linear_backward(const float *g, i64 sgm, i64 sgn, const float *x, i64 sxm, i64 sxk, const float *w, i64 swn,
                    i64 swk, float *gx, float *gw, float *gb, i64 m, i64 n, i64 k, i64 mc, i64 nc, i64 kc,
                    int threads, int act, const float *pre, i64 spm, i64 spn) {
    float *dz = NULL;
    if (act != 0 && m * n > 0) {
        dz = malloc(sizeof(float) * (size_t)(m * n));
        if (dz == NULL) return -1;
#pragma omp parallel for num_threads(threads) if (m * n >= PARALLEL_MIN_CALLS) schedule(static)
        for (i64 i = 0; i < m; ++i) kz_activation_grad_n(g + i * sgm, sgn, pre + i * spm, spn, dz + i * n, n, act);
        g = dz, sgm = n, sgn = 1;
    }
    const i64 g_rows[D_FIELDS] = {[D_KIND] = STRIDED, [D_S0] = sgm, [D_S1] = sgn};
    const i64 g_cols[D_FIELDS] = {[D_KIND] = STRIDED, [D_S0] = sgn, [D_S1] = sgm};  // gᵀ
    const i64 w_desc[D_FIELDS] = {[D_KIND] = STRIDED, [D_S0] = swn, [D_S1] = swk};
    const i64 x_desc[D_FIELDS] = {[D_KIND] = STRIDED, [D_S0] = sxm, [D_S1] = sxk};
    int rc = gemm(1, m, k, n, g, g_rows, w, w_desc, gx, k, 0, 0, NULL, NULL, mc, nc, kc, threads);
    rc |= gemm(1, n, k, m, g, g_cols, x, x_desc, gw, k, 0, 0, NULL, NULL, mc, nc, kc, threads);
    if (gb != NULL) column_sums(g, sgm, sgn, gb, m, n, threads);
    free(dz);
    return rc;
}
