// conv2d's gradients as implicit GEMMs on the shared GEMM core, per image n:
//   grad_x[n] (C × H·W) = wᵀ (C × K·R·S) · B,  B(kred = (k, r, s), (ih, iw)) = g[n][k][oh][ow] where
//       oh = (ih + ph − r·dh) / sh and ow likewise divide exactly (IM2COL_T; zero elsewhere)
//   grad_w (K × C·R·S) += g[n] (K × OH·OW) · B,  B((oh, ow), kred = (c, r, s)) = x[n][c][ih][iw] (IM2ROW),
//       summed over the images into one grad_w (in image order: deterministic)
//   grad_b[k] = Σ_n Σ_p g[n][k][p], each channel summed in order by one thread
// A 1×1 convolution with stride 1 and no padding reads g[n] and x[n] as plain matrices.
#include "../_openmp/parallel.h"
#include "../linear/gemm_openmp.h"

int conv2d_backward(const float *g, const float *x, const float *wt, float *gx, float *gw, float *gb, i64 n, i64 c,
                    i64 h, i64 wd, i64 k, i64 r, i64 s, i64 oh, i64 ow, i64 sh, i64 sw, i64 ph, i64 pw, i64 dh,
                    i64 dw, i64 mc, i64 nc, i64 kc, int threads) {
    const int plain = r == 1 && s == 1 && sh == 1 && sw == 1 && ph == 0 && pw == 0;
    const i64 wt_desc[D_FIELDS] = {[D_KIND] = STRIDED, [D_S0] = k * r * s, [D_S1] = 1};  // wt: (C, K·R·S)
    i64 gx_b[D_FIELDS] = {[D_KIND] = IM2COL_T, [D_BATCH] = k * oh * ow, [D_C] = k, [D_H] = oh, [D_W] = ow,
                          [D_R] = r, [D_S] = s, [D_OH] = h, [D_OW] = wd, [D_SH] = sh, [D_SW] = sw, [D_PH] = ph,
                          [D_PW] = pw, [D_DH] = dh, [D_DW] = dw};
    if (plain) gx_b[D_KIND] = STRIDED, gx_b[D_S0] = oh * ow, gx_b[D_S1] = 1;
    int rc = gemm(n, c, h * wd, k * r * s, wt, wt_desc, g, gx_b, gx, h * wd, c * h * wd, 0, NULL, NULL, mc, nc, kc,
                  threads);

    const i64 g_desc[D_FIELDS] = {[D_KIND] = STRIDED, [D_BATCH] = k * oh * ow, [D_S0] = oh * ow, [D_S1] = 1};
    i64 gw_b[D_FIELDS] = {[D_KIND] = IM2ROW, [D_BATCH] = c * h * wd, [D_C] = c, [D_H] = h, [D_W] = wd, [D_R] = r,
                          [D_S] = s, [D_OH] = oh, [D_OW] = ow, [D_SH] = sh, [D_SW] = sw, [D_PH] = ph, [D_PW] = pw,
                          [D_DH] = dh, [D_DW] = dw};
    if (plain) gw_b[D_KIND] = STRIDED, gw_b[D_S0] = 1, gw_b[D_S1] = h * wd;  // B(p, c) = x[n][c][p]
    rc |= gemm(n, k, c * r * s, oh * ow, g, g_desc, x, gw_b, gw, c * r * s, 0, 1, NULL, NULL, mc, nc, kc, threads);

    if (gb != NULL) {
        const i64 plane = oh * ow;
#pragma omp parallel for num_threads(threads) schedule(static) if (k * plane >= PARALLEL_MIN)
        for (i64 kk = 0; kk < k; ++kk) {
            float sum = 0.0f;
            for (i64 b = 0; b < n; ++b) {
                const float *row = g + (b * k + kk) * plane;
                for (i64 p = 0; p < plane; ++p) sum += row[p];
            }
            gb[kk] = sum;
        }
    }
    return rc;
}
