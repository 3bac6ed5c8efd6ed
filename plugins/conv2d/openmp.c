// conv2d as an implicit GEMM per image on the shared GEMM core: out[n] (K × OH·OW) = w (K × C·R·S) ·
// im2col(x[n]) (C·R·S × OH·OW), plus the bias per row. The im2col matrix is never built: packing gathers
// its panels from x (IM2COL), one image row at a time. A 1×1 convolution with stride 1 and no padding
// reads x[n] (C × H·W) as a plain matrix.
#include "../_gemm/gemm_openmp.h"

int conv2d(const float *x, const float *w, const float *bias, float *out, i64 n, i64 c, i64 h, i64 wd, i64 k,
           i64 r, i64 s, i64 oh, i64 ow, i64 sh, i64 sw, i64 ph, i64 pw, i64 dh, i64 dw, i64 mc, i64 nc, i64 kc,
           int threads) {
    const i64 ad[D_FIELDS] = {[D_KIND] = STRIDED, [D_S0] = c * r * s, [D_S1] = 1};
    i64 bd[D_FIELDS] = {[D_KIND] = IM2COL, [D_BATCH] = c * h * wd, [D_C] = c, [D_H] = h, [D_W] = wd, [D_R] = r,
                        [D_S] = s, [D_OH] = oh, [D_OW] = ow, [D_SH] = sh, [D_SW] = sw, [D_PH] = ph, [D_PW] = pw,
                        [D_DH] = dh, [D_DW] = dw};
    if (r == 1 && s == 1 && sh == 1 && sw == 1 && ph == 0 && pw == 0) {
        bd[D_KIND] = STRIDED, bd[D_S0] = h * wd, bd[D_S1] = 1;
    }
    return gemm(n, k, oh * ow, c * r * s, w, ad, x, bd, out, oh * ow, k * oh * ow, 0, bias, NULL, mc, nc, kc,
                threads);
}
