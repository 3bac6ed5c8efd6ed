// conv2d's gradients, per image n, on the shared GEMM core's packing and micro-kernel:
//   grad_x[n] (C × H·W) = wᵀ (C × K·R·S) · B,  B(kred = (k, r, s), (ih, iw)) = g[n][k][oh][ow] where
//       oh = (ih + ph − r·dh) / sh and ow likewise divide exactly (IM2COL_T; zero elsewhere): the shared gemm
//   grad_w (K × C·R·S) = Σ_n g[n] (K × OH·OW) · X[n],  X[n](p, tap = (c, r, s)) = x[n][c][ih][iw] (im2row)
//   grad_b[k] = Σ_n Σ_p g[n][k][p], each channel summed in order by one thread
// A 1×1 convolution with stride 1 and no padding reads g[n] and x[n] as plain matrices: grad_w on the shared
// gemm too (g packed by each of its column slices; ~6% faster than grad_weight at 4x64x56x56 into 256
// channels, where g is 13 MB and only 2 panels of taps share it).
//
// grad_w of any other convolution has its own driver (grad_weight): g of every image is packed once into
// MR-row panels shared by the threads, and a task (one NR-wide panel of taps, dealt dynamically) packs its X
// panels straight from x and runs the micro-kernel over all of g's panels, adding every image into its own
// columns of grad_w in image order (deterministic, no write shared between threads). On the shared gemm (its
// IM2ROW gather) each X element cost a tap lookup and four bounds checks, packing took as long as the
// multiply-adds, and each of the 8 column slices packed g again per image; this driver brings grad_w to the
// forward's speed (docs/design/conv.md).
#include "../_openmp/parallel.h"
#include "../_gemm/gemm_openmp.h"

enum { G_C, G_H, G_W, G_R, G_S, G_OH, G_OW, G_SH, G_SW, G_PH, G_PW, G_DH, G_DW, G_FIELDS };

// X panel of image img for taps [j0, j0 + cols) (cols <= NR) and pixels [p0, p0 + kc):
// bp[p][j] = img[c][oh·sh − ph + r·dh][ow·sw − pw + s·dw] for tap j0 + j = (c·R + r)·S + s, 0 outside the
// image and past cols. A tap reads each output row's pixels from one image row at a fixed step: the bounds
// are settled once per row, the copy in between is a load and a store. Runs of at most 64 pixels, every tap
// of a run before the next: the stores stay within 8 KB of the panel (tap by tap over the whole kc·NR panel,
// 32 KB, as large as L1, packing took 0.57 of the micro-kernel's samples; run by run 0.45).
static void pack_taps(const float *img, const i64 *geo, i64 p0, i64 kc, i64 j0, i64 cols, float *restrict bp) {
    const i64 H = geo[G_H], W = geo[G_W], S = geo[G_S], rs = geo[G_R] * S, OW = geo[G_OW], sh = geo[G_SH],
              sw = geo[G_SW];
    const float *plane[NR];
    i64 ty[NR], tx[NR];
    for (i64 j = 0; j < cols; ++j) {
        const i64 tap = j0 + j, r = tap % rs / S, s = tap % S;
        plane[j] = img + tap / rs * H * W;
        ty[j] = r * geo[G_DH] - geo[G_PH];
        tx[j] = s * geo[G_DW] - geo[G_PW];
    }
    for (i64 p = 0, oh = p0 / OW, ow = p0 % OW; p < kc;) {
        const i64 run = min_i64(min_i64(kc - p, OW - ow), 64);
        float *out = bp + p * NR;
        for (i64 j = 0; j < cols; ++j) {
            const i64 ih = oh * sh + ty[j], lo = ow * sw + tx[j];  // column of pixel t: lo + t·sw
            i64 t0 = run, t1 = run;  // [t0, t1): the pixels of the run inside the image
            if (ih >= 0 && ih < H) {
                t0 = min_i64(run, max_i64(0, ceil_div(-lo, sw)));
                t1 = max_i64(t0, min_i64(run, ceil_div(W - lo, sw)));
                const float *row = plane[j] + ih * W;
                for (i64 t = t0; t < t1; ++t) out[t * NR + j] = row[lo + t * sw];
            }
            for (i64 t = 0; t < t0; ++t) out[t * NR + j] = 0.0f;
            for (i64 t = t1; t < run; ++t) out[t * NR + j] = 0.0f;
        }
        for (i64 t = 0; t < run; ++t)
            for (i64 j = cols; j < NR; ++j) out[t * NR + j] = 0.0f;
        p += run;
        ow += run;
        if (ow == OW) ow = 0, ++oh;
    }
}

// grad_w = Σ_n g[n] · X[n] (see the top). Returns 0, or -1 when the packing buffers cannot be allocated.
static int grad_weight(const float *g, const float *x, float *gw, i64 n, i64 k, const i64 *geo, i64 kc,
                       int threads) {
    const i64 P = geo[G_OH] * geo[G_OW], taps = geo[G_C] * geo[G_R] * geo[G_S], kp = round_up(k, MR);
    const i64 image = geo[G_C] * geo[G_H] * geo[G_W];
    if (n == 0) {
        memset(gw, 0, sizeof(float) * (size_t)(k * taps));
        return 0;
    }
    kc = min_i64(kc, P);
    const i64 blocks = (P + kc - 1) / kc, panels = (taps + NR - 1) / NR;
    // g of every image packed once for all tasks: per block of kc pixels, kp/MR panels of MR rows,
    // ap[p][i] = g[n][k0 + i][p0 + p]
    float *ap_all = aligned_alloc(64, sizeof(float) * (size_t)round_up(n * kp * P, 16));
    float *bp_all = aligned_alloc(64, sizeof(float) * (size_t)(kc * NR * threads));
    if (ap_all == NULL || bp_all == NULL) {
        free(ap_all);
        free(bp_all);
        return -1;
    }
    const i64 g_desc[D_FIELDS] = {[D_KIND] = STRIDED, [D_S0] = P, [D_S1] = 1};
#pragma omp parallel num_threads(threads) if (n * k * taps * P >= GEMM_PARALLEL_MIN)
    {
        float *bp = bp_all + kc * NR * omp_get_thread_num();
#pragma omp for schedule(static)
        for (i64 q = 0; q < n * blocks; ++q) {
            const i64 b = q / blocks, p0 = q % blocks * kc;
            pack_a(g + b * k * P, g_desc, 0, k, p0, min_i64(kc, P - p0), ap_all + b * kp * P + p0 * kp);
        }
#pragma omp for schedule(dynamic)
        for (i64 jp = 0; jp < panels; ++jp) {
            const i64 j0 = jp * NR, cols = min_i64(NR, taps - j0);
            for (i64 b = 0; b < n; ++b) {
                for (i64 p0 = 0; p0 < P; p0 += kc) {
                    const i64 kcur = min_i64(kc, P - p0);
                    const float *ap = ap_all + b * kp * P + p0 * kp;
                    pack_taps(x + b * image, geo, p0, kcur, j0, cols, bp);
                    for (i64 i = 0; i < k; i += MR)
                        micro_kernel(kcur, ap + i * kcur, bp, gw + i * taps + j0, taps, min_i64(MR, k - i), cols,
                                     b == 0 && p0 == 0, NULL, NULL);
                }
            }
        }
    }
    free(ap_all);
    free(bp_all);
    return 0;
}

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

    if (plain) {  // B(p, c) = x[n][c][p], read along p by the core's packing; summed over the images in order
        const i64 g_desc[D_FIELDS] = {[D_KIND] = STRIDED, [D_BATCH] = k * oh * ow, [D_S0] = oh * ow, [D_S1] = 1};
        const i64 x_desc[D_FIELDS] = {[D_KIND] = STRIDED, [D_BATCH] = c * h * wd, [D_S0] = 1, [D_S1] = h * wd};
        rc |= gemm(n, k, c, oh * ow, g, g_desc, x, x_desc, gw, c, 0, 1, NULL, NULL, mc, nc, kc, threads);
    } else {
        const i64 geo[G_FIELDS] = {c, h, wd, r, s, oh, ow, sh, sw, ph, pw, dh, dw};
        rc |= grad_weight(g, x, gw, n, k, geo, kc, threads);
    }

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
