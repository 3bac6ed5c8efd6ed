// A cache-blocked float32 GEMM over *described* operands, shared by the openmp plugins of matmul, linear,
// linear_backward, conv2d and conv2d_backward (pasted in by `#include`, see kernelzoo/backends/sources.py):
//
//   C[b] (M×N) = A[b] (M×K) · B[b] (K×N)  (+ bias per row or per column), b = 0 .. batch-1
//
// and gemm_activated applies an activation (activation_openmp.h) to each output as its last K block is stored.
//
// An operand is a descriptor (an int64 array, D_* below) saying where element (i, k) of A or (k, j) of B
// lives: a strided matrix, or one of the im2col gathers of a convolution. Packing reads it straight into
// the micro-kernel's layout, so a convolution never materialises its im2col matrix. Each thread runs BLIS's
// loop nest on its own part of C (whole batches, or a slice of columns or rows; see gemm):
//
//   for jc over its columns by nc:  for pc over K by kc:
//     pack B's kc×nc block in NR-column panels, k-major (kept in L2/L3)
//     for ic over its rows by mc: pack A's mc×kc block in MR-row panels (L2), then per MR×NR tile:
//       kc rank-1 updates in registers (micro_kernel), each B panel streamed from L1
//
// Panels are zero-padded to MR / NR, so the micro-kernel always runs whole tiles and only stores are
// masked. With `accumulate`, every batch adds into one C (a weight gradient summed over images).
#include "../_openmp/parallel.h"
#include "../_openmp/transpose.h"
#include "activation_openmp.h"
#include <stdlib.h>
#include <string.h>

#include <omp.h>

#ifndef MR
#define MR 6
#endif
#ifndef NR
#define NR 32
#endif
#ifndef TASKS
#define TASKS 4  // slices of C per thread, dealt dynamically: a thread slowed by other work takes fewer
#endif
#define NV (NR / 16)

typedef long long i64;
// 16 floats: one zmm register with AVX-512, two ymm without; gcc's vector extension keeps the
// micro-kernel's MR·NV accumulators in registers whatever the ISA.
typedef float vf16 __attribute__((vector_size(64)));
typedef float vf16u __attribute__((vector_size(64), aligned(4)));

// Operand descriptor fields. STRIDED: (i, k) of A at i*S0 + k*S1, (k, j) of B at k*S0 + j*S1.
// The gathers read an NCHW image of C channels and H×W pixels (after b*BATCH) through a convolution
// with kernel R×S, strides SH, SW, padding PH, PW and dilation DH, DW; OH×OW is the grid of pixels p:
//   IM2COL   (B of conv2d):        B(kred, p) = img[c][oh*SH - PH + r*DH][ow*SW - PW + s*DW]
//   IM2COL_T (B of the input grad): B(kred, p) = img[c][oh'][ow'] where oh' = (oh + PH - r*DH) / SH exactly
//   IM2ROW   (B of the weight grad): B(p, kred) = img[c][oh*SH - PH + r*DH][ow*SW - PW + s*DW]
// with kred = (c*R + r)*S + s, p = oh*OW + ow, and zero wherever the pixel falls outside the image.
enum { D_KIND, D_BATCH, D_S0, D_S1, D_C, D_H, D_W, D_R, D_S, D_OH, D_OW, D_SH, D_SW, D_PH, D_PW, D_DH, D_DW,
       D_FIELDS };
enum { STRIDED, IM2COL, IM2COL_T, IM2ROW };

static i64 min_i64(i64 a, i64 b) { return a < b ? a : b; }
static i64 max_i64(i64 a, i64 b) { return a > b ? a : b; }
static i64 round_up(i64 x, i64 to) { return (x + to - 1) / to * to; }
static i64 ceil_div(i64 a, i64 b) { return a >= 0 ? (a + b - 1) / b : -((-a) / b); }  // b > 0

// A block (rows×kc at (i0, k0)) -> MR-row panels: ap[panel][p][i] = A(i0 + panel*MR + i, k0 + p).
static void pack_a(const float *a, const i64 *d, i64 i0, i64 rows, i64 k0, i64 kc, float *restrict ap) {
    const i64 s0 = d[D_S0], s1 = d[D_S1];
    for (i64 r0 = 0; r0 < rows; r0 += MR, ap += kc * MR) {
        i64 n = min_i64(MR, rows - r0);
        for (i64 p = 0; p < kc; ++p) {
            const float *col = a + (i0 + r0) * s0 + (k0 + p) * s1;
            for (i64 i = 0; i < n; ++i) ap[p * MR + i] = col[i * s0];
            for (i64 i = n; i < MR; ++i) ap[p * MR + i] = 0.0f;
        }
    }
}

// dst[0..n) = row[lo + t*step] where that index is in [0, len), else 0; lo may be negative.
static void gather_row(float *restrict dst, const float *row, i64 n, i64 lo, i64 step, i64 len) {
    i64 t0 = min_i64(n, max_i64(0, ceil_div(-lo, step)));  // first t with lo + t*step >= 0
    i64 t1 = max_i64(t0, min_i64(n, ceil_div(len - lo, step)));  // first t with lo + t*step >= len
    for (i64 t = 0; t < t0; ++t) dst[t] = 0.0f;
    if (step == 1) {
        memcpy(dst + t0, row + lo + t0, sizeof(float) * (size_t)(t1 - t0));
    } else {
        for (i64 t = t0; t < t1; ++t) dst[t] = row[lo + t * step];
    }
    for (i64 t = t1; t < n; ++t) dst[t] = 0.0f;
}

// Per reduction row kred of a pc block, for IM2COL / IM2COL_T: the channel's offset and the row and
// column shifts of tap (r, s): tab[3p..3p+2].
static void kred_table(const i64 *d, i64 k0, i64 kc, i64 *tab) {
    const i64 rs = d[D_R] * d[D_S], hw = d[D_H] * d[D_W];
    const int t = d[D_KIND] == IM2COL_T;
    for (i64 p = 0; p < kc; ++p) {
        i64 kred = k0 + p, c = kred / rs, r = kred % rs / d[D_S], s = kred % d[D_S];
        tab[3 * p] = c * hw;
        tab[3 * p + 1] = t ? d[D_PH] - r * d[D_DH] : r * d[D_DH] - d[D_PH];
        tab[3 * p + 2] = t ? d[D_PW] - s * d[D_DW] : s * d[D_DW] - d[D_PW];
    }
}

// B panel (kc×cols at (k0, j0), cols <= NR) -> bp[p][j] = B(k0 + p, j0 + j), zero past cols.
static void pack_b_panel(const float *b, const i64 *d, const i64 *tab, i64 k0, i64 kc, i64 j0, i64 cols,
                         float *restrict bp) {
    const i64 kind = d[D_KIND], H = d[D_H], W = d[D_W], OW = d[D_OW], sh = d[D_SH], sw = d[D_SW];
    if (kind == STRIDED) {
        const i64 s0 = d[D_S0], s1 = d[D_S1];
        if (s0 == 1 && s1 != 1) {  // contiguous along k (linear's wᵀ): the panel is a transpose of B's columns,
            const float *cols0 = b + k0 + j0 * s1;  // B(k0 + p, j0 + j) = cols0[j·s1 + p]
            i64 j = 0;
#ifdef KZ_TRANSPOSE16_AVX512
            for (; j + 16 <= cols; j += 16) {  // in 16 × 16 blocks (8 % of linear at 1024³ went to the scatter below)
                i64 p = 0;
                for (; p + 16 <= kc; p += 16) kz_transpose16(bp + p * NR + j, NR, cols0 + j * s1 + p, s1);
                for (; p < kc; ++p)
                    for (i64 jj = j; jj < j + 16; ++jj) bp[p * NR + jj] = cols0[jj * s1 + p];
            }
#endif
            for (; j < cols; ++j) {  // else each column read whole and scattered into the panel (kc·NR floats, in
                const float *col = cols0 + j * s1;  // L1) rather than gathered at stride s1
                for (i64 p = 0; p < kc; ++p) bp[p * NR + j] = col[p];
            }
            for (i64 p = 0; p < kc; ++p)
                for (i64 j = cols; j < NR; ++j) bp[p * NR + j] = 0.0f;
            return;
        }
        for (i64 p = 0; p < kc; ++p) {
            const float *row = b + (k0 + p) * s0 + j0 * s1;
            if (s1 == 1) {
                memcpy(bp + p * NR, row, sizeof(float) * (size_t)cols);
            } else {
                for (i64 j = 0; j < cols; ++j) bp[p * NR + j] = row[j * s1];
            }
            for (i64 j = cols; j < NR; ++j) bp[p * NR + j] = 0.0f;
        }
    } else if (kind == IM2COL) {
        // Columns are pixels, in runs along output rows (at most NR of them: one per output row the panel
        // touches), the same for every tap: worked out once. A tap's run reads one image row at step sw, from
        // column ow*sw + dx; the columns outside the image are zeros.
        i64 seg_j[NR], seg_oh[NR], seg_ow[NR], seg_len[NR], segs = 0;
        for (i64 j = 0, oh = j0 / OW, ow = j0 % OW; j < cols; oh += 1, ow = 0, ++segs) {
            seg_j[segs] = j, seg_oh[segs] = oh, seg_ow[segs] = ow, seg_len[segs] = min_i64(cols - j, OW - ow);
            j += seg_len[segs];
        }
        for (i64 p = 0; p < kc; ++p) {
            const float *img = b + tab[3 * p];
            const i64 dy = tab[3 * p + 1], dx = tab[3 * p + 2];
            float *dst = bp + p * NR;
            for (i64 q = 0; q < segs; ++q) {
                float *out = dst + seg_j[q];
                const i64 ih = seg_oh[q] * sh + dy, n = seg_len[q], lo = seg_ow[q] * sw + dx;
                if (ih < 0 || ih >= H) {
                    for (i64 t = 0; t < n; ++t) out[t] = 0.0f;
                    continue;
                }
                const float *row = img + ih * W;
                if (sw == 1 && lo >= 0 && lo + n <= W) {  // the common case: inside the image
                    for (i64 t = 0; t < n; ++t) out[t] = row[lo + t];
                } else {
                    for (i64 t = 0; t < n; ++t) {
                        const i64 iw = lo + t * sw;
                        out[t] = iw >= 0 && iw < W ? row[iw] : 0.0f;
                    }
                }
            }
            for (i64 j = cols; j < NR; ++j) dst[j] = 0.0f;
        }
    } else if (kind == IM2COL_T) {
        // Columns are pixels: walk them one output row at a time. The source row is (oh + dy) / sh when that
        // divides exactly, the source column (ow + t + dx) / sw likewise (a memcpy at stride 1).
        for (i64 p = 0; p < kc; ++p) {
            const float *img = b + tab[3 * p];
            const i64 dy = tab[3 * p + 1], dx = tab[3 * p + 2];
            float *dst = bp + p * NR;
            for (i64 j = 0, oh = j0 / OW, ow = j0 % OW; j < cols; oh += 1, ow = 0) {
                i64 run = min_i64(cols - j, OW - ow), num = oh + dy;
                if (num < 0 || num % sh != 0 || num / sh >= H) {
                    memset(dst + j, 0, sizeof(float) * (size_t)run);
                } else if (sw == 1) {
                    gather_row(dst + j, img + num / sh * W, run, ow + dx, 1, W);
                } else {
                    const float *row = img + num / sh * W;
                    for (i64 t = 0; t < run; ++t) {
                        i64 x = ow + t + dx;
                        dst[j + t] = x >= 0 && x % sw == 0 && x / sw < W ? row[x / sw] : 0.0f;
                    }
                }
                j += run;
            }
            for (i64 j = cols; j < NR; ++j) dst[j] = 0.0f;
        }
    } else {  // IM2ROW: rows are pixels, columns are taps (c, r, s) with their own shifts
        const i64 rs = d[D_R] * d[D_S], hw = H * W;
        i64 off[NR], ty[NR], tx[NR];
        for (i64 j = 0; j < cols; ++j) {
            i64 kred = j0 + j, r = kred % rs / d[D_S], s = kred % d[D_S];
            off[j] = kred / rs * hw;
            ty[j] = r * d[D_DH] - d[D_PH];
            tx[j] = s * d[D_DW] - d[D_PW];
        }
        for (i64 p = 0, oh = k0 / OW, ow = k0 % OW; p < kc; ++p) {
            float *dst = bp + p * NR;
            for (i64 j = 0; j < cols; ++j) {
                i64 ih = oh * sh + ty[j], iw = ow * sw + tx[j];
                dst[j] = ih >= 0 && ih < H && iw >= 0 && iw < W ? b[off[j] + ih * W + iw] : 0.0f;
            }
            for (i64 j = cols; j < NR; ++j) dst[j] = 0.0f;
            if (++ow == OW) ow = 0, ++oh;
        }
    }
}

// One MR×NR tile: kc rank-1 updates from the panels, then C = acc (+ bias) on the first K block, else C += acc;
// then C = act(C) where the block is the last (act nonzero; micro_kernel: none).
// The tile's rows of C are prefetched first (a prefetch never faults, so rows past `rows` are harmless): they
// arrive during the updates instead of stalling the stores; with the update loop unrolled by 4 (figures in
// docs/design/gemm.md).
static inline void micro_kernel_activated(i64 kc, const float *restrict ap, const float *restrict bp,
                                          float *restrict c, i64 ldc, i64 rows, i64 cols, int first,
                                          const float *bias_row, const float *bias_col, int act) {
    vf16 acc[MR][NV];
#pragma GCC unroll 16
    for (int i = 0; i < MR; ++i)
        for (int v = 0; v < NV; ++v) __builtin_prefetch(c + i * ldc + 16 * v, 1, 3);
#pragma GCC unroll 16
    for (int i = 0; i < MR; ++i)
#pragma GCC unroll 4
        for (int v = 0; v < NV; ++v) acc[i][v] = (vf16){0};
#pragma GCC unroll 4
    for (i64 p = 0; p < kc; ++p) {
        vf16 bv[NV];
#pragma GCC unroll 4
        for (int v = 0; v < NV; ++v) bv[v] = *(const vf16 *)(bp + p * NR + 16 * v);
#pragma GCC unroll 16
        for (int i = 0; i < MR; ++i) {
            float ai = ap[p * MR + i];
#pragma GCC unroll 4
            for (int v = 0; v < NV; ++v) acc[i][v] += ai * bv[v];
        }
    }
    float tile[MR][NR] __attribute__((aligned(64)));
    for (int i = 0; i < MR; ++i)
        for (int v = 0; v < NV; ++v) *(vf16 *)(tile[i] + 16 * v) = acc[i][v];
    if (act) {  // the last K block: C's final values in the tile, the activation over all of it (one long loop)
        for (i64 i = 0; i < rows; ++i) {
            const float *ci = c + i * ldc;
            const float add = first && bias_row != NULL ? bias_row[i] : 0.0f;
            for (i64 j = 0; j < cols; ++j)
                tile[i][j] += add + (first ? (bias_col != NULL ? bias_col[j] : 0.0f) : ci[j]);
        }
        kz_activate_n(tile[0], tile[0], MR * NR, act);  // the padding past C's rows and columns too, unstored
        for (i64 i = 0; i < rows; ++i) memcpy(c + i * ldc, tile[i], sizeof(float) * (size_t)cols);
        return;
    }
    for (i64 i = 0; i < rows; ++i) {
        float *ci = c + i * ldc;
        float add = first && bias_row != NULL ? bias_row[i] : 0.0f;
        if (cols == NR && bias_col == NULL) {
            for (int v = 0; v < NV; ++v) {
                vf16 t = *(vf16 *)(tile[i] + 16 * v) + add;
                *(vf16u *)(ci + 16 * v) = first ? t : *(vf16u *)(ci + 16 * v) + t;
            }
            continue;
        }
        for (i64 j = 0; j < cols; ++j) {
            float t = tile[i][j] + add + (first && bias_col != NULL ? bias_col[j] : 0.0f);
            ci[j] = first ? t : ci[j] + t;
        }
    }
}

static inline void micro_kernel(i64 kc, const float *restrict ap, const float *restrict bp, float *restrict c,
                                i64 ldc, i64 rows, i64 cols, int first, const float *bias_row,
                                const float *bias_col) {
    micro_kernel_activated(kc, ap, bp, c, ldc, rows, cols, first, bias_row, bias_col, 0);
}

typedef struct {
    i64 m, n, k;
    const float *a, *b;
    const i64 *ad, *bd;
    float *c;
    i64 ldc, c_batch;
    int accumulate;
    const float *bias_row, *bias_col;
    i64 mc, nc, kc;
    int activation;
} gemm_args;

// C[bi][m_lo:m_hi, n_lo:n_hi] = A[bi][m_lo:m_hi, :] · B[bi][:, n_lo:n_hi], by one thread with its own
// packing buffers (n_lo a multiple of NR).
static void gemm_block(const gemm_args *g, i64 bi, i64 m_lo, i64 m_hi, i64 n_lo, i64 n_hi, float *ap, float *bp,
                       i64 *tab) {
    const float *ab = g->a + bi * g->ad[D_BATCH], *bb = g->b + bi * g->bd[D_BATCH];
    float *cb = g->c + (g->accumulate ? 0 : bi * g->c_batch);
    for (i64 jc = n_lo; jc < n_hi; jc += g->nc) {
        i64 ncur = min_i64(g->nc, n_hi - jc), panels = (ncur + NR - 1) / NR;
        for (i64 pc = 0; pc < g->k; pc += g->kc) {
            i64 kcur = min_i64(g->kc, g->k - pc);
            int first = pc == 0 && (!g->accumulate || bi == 0);
            int act = pc + kcur >= g->k ? g->activation : 0;
            if (g->bd[D_KIND] == IM2COL || g->bd[D_KIND] == IM2COL_T) kred_table(g->bd, pc, kcur, tab);
            for (i64 jp = 0; jp < panels; ++jp)
                pack_b_panel(bb, g->bd, tab, pc, kcur, jc + jp * NR, min_i64(NR, ncur - jp * NR), bp + jp * NR * kcur);
            for (i64 ic = m_lo; ic < m_hi; ic += g->mc) {
                i64 mcur = min_i64(g->mc, m_hi - ic);
                pack_a(ab, g->ad, ic, mcur, pc, kcur, ap);
                for (i64 jp = 0; jp < panels; ++jp) {
                    i64 j = jc + jp * NR;
                    for (i64 ip = 0; ip * MR < mcur; ++ip) {
                        i64 i = ic + ip * MR;
                        micro_kernel_activated(kcur, ap + ip * MR * kcur, bp + jp * NR * kcur, cb + i * g->ldc + j,
                                               g->ldc, min_i64(MR, mcur - ip * MR), min_i64(NR, ncur - jp * NR),
                                               first, g->bias_row != NULL ? g->bias_row + i : NULL,
                                               g->bias_col != NULL ? g->bias_col + j : NULL, act);
                    }
                }
            }
        }
    }
}

// C[b] = A[b]·B[b] (+ bias) as described in the header; ldc is C's row stride, c_batch its batch stride
// (unused with accumulate). The threads never wait for each other inside: with enough batches to share out
// evenly (a convolution's images) each thread takes whole batches; otherwise C is cut into up to TASKS slices
// per thread — a grid of row and column ranges, below — dealt dynamically, each slice running every batch
// with its own packing. A barrier per K block was 5× slower than one thread at
// 256×2048×2048 on 2 cores shared with other work (a waiting thread sleeps a scheduler tick), and the
// slices add each element's terms in the same order (batch, then K block) whatever the thread count.
// gemm_activated: the same, each output through activation `act` (0: none; not with accumulate).
// Returns 0, or -1 when the packing buffers cannot be allocated.
static int gemm_activated(i64 batch, i64 m, i64 n, i64 k, const float *a, const i64 *ad, const float *b,
                          const i64 *bd, float *c, i64 ldc, i64 c_batch, int accumulate, const float *bias_row,
                          const float *bias_col, i64 mc, i64 nc, i64 kc, int threads, int act) {
    if (m <= 0 || n <= 0) return 0;
    if (k <= 0 || batch <= 0) {  // an empty sum: the bias, or zeros
        for (i64 bi = 0; bi < (accumulate ? 1 : batch); ++bi)
            for (i64 i = 0; i < m; ++i) {
                float *ci = c + bi * c_batch + i * ldc;
                for (i64 j = 0; j < n; ++j)
                    ci[j] = (bias_row != NULL ? bias_row[i] : 0.0f) + (bias_col != NULL ? bias_col[j] : 0.0f);
                kz_activate_n(ci, ci, n, act);
            }
        return 0;
    }
    const gemm_args g = {m, n, k, a, b, ad, bd, c, ldc, c_batch, accumulate, bias_row, bias_col,
                         round_up(min_i64(mc, m), MR), round_up(min_i64(nc, n), NR), min_i64(kc, k), act};
    const int per_batch = !accumulate && batch >= threads && (batch % threads == 0 || batch >= 4 * threads);
    const i64 panels = (n + NR - 1) / NR, row_blocks = (m + MR - 1) / MR;
    // The slices form a grid of sr row ranges × sc column ranges. Each packs its rows of A and its columns of B
    // once per K block, so A is packed sc times over and B sr times: of the grids of the most slices (up to
    // TASKS per thread) that the tiles allow, the one that packs the fewest floats, sc·m + sr·n.
    i64 sr = 1, sc = 1;
    for (i64 want = (i64)TASKS * threads; want >= 1 && sr * sc == 1; --want)
        for (i64 r = 1, best = -1; r <= want; ++r) {
            const i64 c_ = want / r, cost = c_ * m + r * n;
            if (want % r == 0 && r <= row_blocks && c_ <= panels && (best < 0 || cost < best))
                best = cost, sr = r, sc = c_;
        }
    const i64 slices = sr * sc;
    size_t a_floats = (size_t)round_up(g.mc * g.kc, 16), b_floats = (size_t)round_up(g.nc * g.kc, 16);
    float *bp_all = aligned_alloc(64, sizeof(float) * b_floats * (size_t)threads);
    float *ap_all = aligned_alloc(64, sizeof(float) * a_floats * (size_t)threads);
    i64 *tab_all = malloc(sizeof(i64) * 3 * (size_t)(g.kc * threads));
    if (bp_all == NULL || ap_all == NULL || tab_all == NULL) {
        free(bp_all);
        free(ap_all);
        free(tab_all);
        return -1;
    }
#pragma omp parallel num_threads(threads) if (batch * m * n * k >= GEMM_PARALLEL_MIN)
    {
        int t = omp_get_thread_num();
        float *ap = ap_all + a_floats * (size_t)t, *bp = bp_all + b_floats * (size_t)t;
        i64 *tab = tab_all + 3 * g.kc * t;
        if (per_batch) {
#pragma omp for schedule(dynamic)
            for (i64 bi = 0; bi < batch; ++bi) gemm_block(&g, bi, 0, m, 0, n, ap, bp, tab);
        } else {
#pragma omp for schedule(dynamic)
            for (i64 s = 0; s < slices; ++s) {
                const i64 rs = s / sc, cs = s % sc;
                const i64 r_lo = rs * row_blocks / sr * MR, r_hi = min_i64(m, (rs + 1) * row_blocks / sr * MR);
                const i64 c_lo = cs * panels / sc * NR, c_hi = min_i64(n, (cs + 1) * panels / sc * NR);
                for (i64 bi = 0; bi < batch; ++bi) gemm_block(&g, bi, r_lo, r_hi, c_lo, c_hi, ap, bp, tab);
            }
        }
    }
    free(bp_all);
    free(ap_all);
    free(tab_all);
    return 0;
}

static int gemm(i64 batch, i64 m, i64 n, i64 k, const float *a, const i64 *ad, const float *b, const i64 *bd,
                float *c, i64 ldc, i64 c_batch, int accumulate, const float *bias_row, const float *bias_col,
                i64 mc, i64 nc, i64 kc, int threads) {
    return gemm_activated(batch, m, n, k, a, ad, b, bd, c, ldc, c_batch, accumulate, bias_row, bias_col, mc, nc, kc,
                          threads, 0);
}
