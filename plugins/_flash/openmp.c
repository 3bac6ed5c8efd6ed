// Attention for the CPU in float32, forward and backward, with FlashAttention-2's algorithm.
//
// Forward: one task per (batch, head, block of BLOCK_M query rows), the tasks spread over the
// threads. A task streams K and V in blocks of BLOCK_N keys and keeps each row's running max m and
// sum l of exponentials (the online softmax), so the Nq×Nk scores never exist whole. Per key block:
// S = Q·Kᵀ with Q pre-multiplied by scale·log2(e) (exp2 is then the exponential), P = exp2(S − m),
// O = O·exp2(m_old − m) + P·V. Causal tasks stop at their last row's diagonal.
// Backward: per key block, looping over the query blocks of every head of its GQA group,
// P = exp2(S − lse·log2 e), dP = dO·Vᵀ, dS = P∘(dP − rowsum(dO∘O)), dV += Pᵀ·dO, dK += dSᵀ·Q, and
// either dQ += dS·K in the same task (fused: a task owns a whole head group, so no two tasks write
// one row) or in tasks over query blocks that compute S and dP again.
//
// Products need Kᵀ (and Vᵀ): a task transposes the panels it reads into its own buffer (see
// head_panels), so no thread waits for another. Other tiles are copied into per-thread buffers,
// zero-padded to whole micro-tiles (head dim rounded up to TILE_C, rows to TILE_R), so the products
// run without bounds checks in TILE_R × TILE_C register blocks that gcc turns into vector FMAs:
// 8 × 32 floats, 16 zmm accumulators, the fastest of the block shapes tried (docs/design/flash-attention.md).
#include "../_openmp/transpose.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>
#if defined(__AVX512F__)
#include <immintrin.h>
#endif

#ifndef BLOCK_M
#define BLOCK_M 64
#endif
#ifndef BLOCK_N
#define BLOCK_N 64
#endif
#define TILE_R 8
#define TILE_C 32
#define LOG2E 1.4426950408889634f
#define LN2 0.6931471805599453f

#if BLOCK_M % TILE_R || BLOCK_N % TILE_C
#error "BLOCK_M must be a multiple of TILE_R (8) and BLOCK_N of TILE_C (32)"
#endif

typedef long long i64;

// Sizes and element strides of one call, filled by openmp.py in this order. Every (B, H, N, D)
// tensor's head dim is contiguous; strides are those of its batch, head and row dims. The mask's
// are those of its (B, Hq, Nq, Nk) broadcast view (0 where broadcast).
typedef struct {
    i64 batch, heads, kv_heads, n_q, n_k, d, causal, has_mask;
    i64 q[3], k[3], v[3], o[3], d_o[3], dq[3], dk[3], dv[3];
    i64 mask[4];
} attn_dims;

static inline i64 min64(i64 a, i64 b) { return a < b ? a : b; }
static inline i64 round_up(i64 a, i64 b) { return (a + b - 1) / b * b; }

// 2^x to about 1 ulp for x ≤ 126, 0 below -126 (so exp2(-inf) = 0): x = n + f with n the nearest
// integer (the 1.5·2^23 trick rounds, and leaves n in the low mantissa bits), 2^f by a degree-6
// minimax polynomial on [-0.5, 0.5] (relative error 1.9e-9), 2^n built in the exponent field.
// Plain arithmetic, so loops over it vectorise without libm. Below -126 the arithmetic is garbage
// that the final select discards.
static inline float exp2_approx(float x) {
    const float round_magic = 12582912.0f;
    float xc = x > 126.0f ? 126.0f : x;
    float t = xc + round_magic;
    float n = t - round_magic;
    float f = xc - n;
    int ti, two_n_bits;
    float two_n;
    memcpy(&ti, &t, sizeof ti);
    two_n_bits = (ti - 0x4B400000 + 127) << 23;
    memcpy(&two_n, &two_n_bits, sizeof two_n);
    float p = 1.534581243e-04f;
    p = p * f + 1.339993090e-03f;
    p = p * f + 9.618489072e-03f;
    p = p * f + 5.550328642e-02f;
    p = p * f + 2.402264625e-01f;
    p = p * f + 6.931471825e-01f;
    p = p * f + 1.0f;
    return x < -126.0f ? 0.0f : p * two_n;  // NaN stays NaN through p
}

// C[M×N] (+)= A·B with A read at a[i·a_row + p·a_col], B row-major; M a multiple of TILE_R, N of
// TILE_C; C's old values added when accumulate. Always inlined into gemm_set / gemm_nn / gemm_tn so
// that the strides and the flag are constants.
static inline __attribute__((always_inline)) void gemm(i64 m, i64 n, i64 k, const float *restrict a, i64 a_row,
                                                       i64 a_col, const float *restrict b, i64 ldb,
                                                       float *restrict c, i64 ldc, int accumulate) {
    for (i64 i = 0; i < m; i += TILE_R) {
        for (i64 j = 0; j < n; j += TILE_C) {
            float acc[TILE_R][TILE_C];
            for (int r = 0; r < TILE_R; ++r)
                for (int s = 0; s < TILE_C; ++s) acc[r][s] = accumulate ? c[(i + r) * ldc + j + s] : 0.0f;
            for (i64 p = 0; p < k; ++p) {
                const float *brow = b + p * ldb + j;
                for (int r = 0; r < TILE_R; ++r) {
                    float av = a[(i + r) * a_row + p * a_col];
                    for (int s = 0; s < TILE_C; ++s) acc[r][s] += av * brow[s];
                }
            }
            for (int r = 0; r < TILE_R; ++r)
                for (int s = 0; s < TILE_C; ++s) c[(i + r) * ldc + j + s] = acc[r][s];
        }
    }
}

// C = A·B (C's old values unread), A row-major M×K: the scores of a block.
static void gemm_set(i64 m, i64 n, i64 k, const float *a, i64 lda, const float *b, i64 ldb, float *c, i64 ldc) {
    gemm(m, n, k, a, lda, 1, b, ldb, c, ldc, 0);
}

// C += A·B, A row-major M×K.
static void gemm_nn(i64 m, i64 n, i64 k, const float *a, i64 lda, const float *b, i64 ldb, float *c, i64 ldc) {
    gemm(m, n, k, a, lda, 1, b, ldb, c, ldc, 1);
}

// C += Aᵀ·B, A row-major K×M (the backward's Pᵀ·dO and dSᵀ·Q without transposing P and dS).
static void gemm_tn(i64 m, i64 n, i64 k, const float *a, i64 lda, const float *b, i64 ldb, float *c, i64 ldc) {
    gemm(m, n, k, a, 1, lda, b, ldb, c, ldc, 1);
}

// dst[r][c] = src[r·stride + c]·mul for r < rows, c < d; zero up to rows_pad × ld.
static void load_rows(float *restrict dst, i64 ld, const float *restrict src, i64 stride, i64 rows,
                      i64 d, i64 rows_pad, float mul) {
    for (i64 r = 0; r < rows_pad; ++r) {
        float *out = dst + r * ld;
        i64 c = 0;
        if (r < rows)
            for (; c < d; ++c) out[c] = src[r * stride + c] * mul;
        for (; c < ld; ++c) out[c] = 0.0f;
    }
}

// Keys col0.. (up to BLOCK_N) of one (batch, kv head)'s K or V transposed into a panel, the
// dp × BLOCK_N matrix dst[c][j] = x[col0 + j][c], zero for keys ≥ n_k and c ≥ d (so padded score
// columns stay finite until masked), in 16 × 16 blocks. A panel (32 KiB at 64 × 128) is one contiguous
// operand; one dp × Nk matrix per head instead had rows 4 KiB apart at Nk = 1024, all in the same L1 sets.
// The element loop is slow (strided reads); the whole blocks go through kz_transpose16 where the CPU has
// AVX-512 (../_openmp/transpose.h).
static void transpose_block(float *restrict dst, const float *restrict x, i64 stride, i64 col0, i64 n_k, i64 d,
                            i64 dp) {
    const float *src = x + col0 * stride;
    const i64 cols = min64(BLOCK_N, n_k - col0);
    for (i64 j0 = 0; j0 < BLOCK_N; j0 += 16)
        for (i64 c0 = 0; c0 < dp; c0 += 16) {
#ifdef KZ_TRANSPOSE16_AVX512
            if (j0 + 16 <= cols && c0 + 16 <= d) {
                kz_transpose16(dst + c0 * BLOCK_N + j0, BLOCK_N, src + j0 * stride + c0, stride);
                continue;
            }
#endif
            for (i64 c = c0; c < c0 + 16; ++c)
                for (i64 j = j0; j < j0 + 16; ++j)
                    dst[c * BLOCK_N + j] = c < d && j < cols ? src[j * stride + c] : 0.0f;
        }
}

// Every panel of one (batch, kv head) (panel t at t·BLOCK_N·dp), transposed into a per-thread cache
// unless it holds that head already. Tasks of one head mostly run back to back, so a thread
// transposes a head about once, and no thread waits for another's: barriers are what costs when
// other processes take turns on the cores. At (1, 8, 1024, 64) with the machine's load at 4.5, K
// transposed once for all threads behind a barrier, plus the task loop's own, made this 0.85× as
// fast as torch's SDPA; with the region's end as the only barrier it is 1.04×.
static const float *head_panels(float *cache, i64 *cached, const float *x, const i64 *stride, const attn_dims *dm,
                                i64 b, i64 hk, i64 dp) {
    if (*cached != b * dm->kv_heads + hk) {
        for (i64 col0 = 0; col0 < dm->n_k; col0 += BLOCK_N)
            transpose_block(cache + col0 * dp, x + b * stride[0] + hk * stride[1], stride[2], col0, dm->n_k, dm->d, dp);
        *cached = b * dm->kv_heads + hk;
    }
    return cache;
}

// Adds the mask (in log2 units) and -inf where a key is not attended: beyond n_k (j ≥ cols), past
// the diagonal when causal (key > query), and for padding rows (r ≥ rows: everything).
static void mask_scores(float *restrict s, const attn_dims *dm, const float *mask, i64 b, i64 h, i64 row0,
                        i64 rows, i64 rows_pad, i64 col0, i64 cols, i64 cols_pad) {
    const int causal_block = dm->causal && col0 + cols - 1 > row0;
    for (i64 r = 0; r < rows_pad; ++r) {
        float *srow = s + r * BLOCK_N;
        if (r >= rows) {
            for (i64 j = 0; j < cols_pad; ++j) srow[j] = -INFINITY;
            continue;
        }
        if (dm->has_mask) {
            const float *mrow = mask + b * dm->mask[0] + h * dm->mask[1] + (row0 + r) * dm->mask[2]
                                + col0 * dm->mask[3];
            for (i64 j = 0; j < cols; ++j) srow[j] += LOG2E * mrow[j * dm->mask[3]];
        }
        for (i64 j = cols; j < cols_pad; ++j) srow[j] = -INFINITY;
        if (causal_block)
            for (i64 j = row0 + r + 1 - col0 > 0 ? row0 + r + 1 - col0 : 0; j < cols; ++j) srow[j] = -INFINITY;
    }
}

// 16 floats: one zmm register with AVX-512, two ymm or four xmm without (gcc's vector extension).
typedef float vf16 __attribute__((vector_size(64)));
typedef int vi16 __attribute__((vector_size(64)));

static inline vf16 load16(const float *p) {
    vf16 v;
    memcpy(&v, p, sizeof v);
    return v;
}

// a > b ? a : b lane by lane (b where a is NaN)
static inline vf16 max16(vf16 a, vf16 b) {
    const vi16 gt = a > b;
    return (vf16)((gt & (vi16)a) | (~gt & (vi16)b));
}

// The largest of a row's scores (cols_p a multiple of TILE_C = 32), in four independent vector chains
// so that the max's latency does not bound the loop. With gcc's own vectorisation of a lane array
// this cost 0.18 ns an element on an AVX-512 Intel core at 512-bit vectors (0.05 at 256); this way
// 0.06 at either width.
static float row_max(const float *restrict s, i64 cols_p) {
    vf16 m0 = load16(s), m1 = load16(s + 16), m2 = m0, m3 = m1;
    i64 j = TILE_C;
    for (; j + 2 * TILE_C <= cols_p; j += 2 * TILE_C) {
        m0 = max16(load16(s + j), m0);
        m1 = max16(load16(s + j + 16), m1);
        m2 = max16(load16(s + j + 32), m2);
        m3 = max16(load16(s + j + 48), m3);
    }
    if (j < cols_p) {
        m0 = max16(load16(s + j), m0);
        m1 = max16(load16(s + j + 16), m1);
    }
    m0 = max16(max16(m0, m1), max16(m2, m3));
    float r = m0[0];
    for (int t = 1; t < 16; ++t) r = m0[t] > r ? m0[t] : r;
    return r;
}

#if defined(__AVX512F__) && !defined(KZ_PORTABLE)
#define EXP2_AVX512 1
// exp2_approx of 16 lanes in AVX-512 (the same values: n rounded to nearest, the same polynomial):
// vrndscaleps splits x, vscalefps applies 2^n, a zero mask gives 0 below -126 (NaN stays NaN); a third
// fewer instructions than gcc's vectorised exp2_approx.
static inline vf16 exp2_16(vf16 x) {
    const __m512 v = (__m512)x;
    const __m512 n = _mm512_roundscale_ps(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    const __m512 f = _mm512_sub_ps(v, n);
    __m512 p = _mm512_set1_ps(1.534581243e-04f);
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(1.339993090e-03f));
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(9.618489072e-03f));
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(5.550328642e-02f));
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(2.402264625e-01f));
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(6.931471825e-01f));
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(1.0f));
    const __mmask16 keep = _mm512_cmp_ps_mask(v, _mm512_set1_ps(-126.0f), _CMP_NLT_UQ);
    return (vf16)_mm512_maskz_scalef_ps(keep, p, n);
}

static inline void store16(float *p, vf16 v) { memcpy(p, &v, sizeof v); }
#endif

// s = exp2(s − shift) over a row, its sum added lane-wise into part[TILE_C]: a row's sum l stays
// spread over TILE_C lanes until the end of the task, so no block pays for a horizontal sum.
static void exp2_row(float *restrict s, i64 cols_p, float shift, float *restrict part) {
#ifdef EXP2_AVX512
    vf16 sum0 = load16(part), sum1 = load16(part + 16);
    for (i64 j = 0; j < cols_p; j += TILE_C) {
        const vf16 p0 = exp2_16(load16(s + j) - shift), p1 = exp2_16(load16(s + j + 16) - shift);
        store16(s + j, p0);
        store16(s + j + 16, p1);
        sum0 += p0;
        sum1 += p1;
    }
    store16(part, sum0);
    store16(part + 16, sum1);
#else
    for (i64 j = 0; j < cols_p; j += TILE_C)
        for (int t = 0; t < TILE_C; ++t) {
            const float p = exp2_approx(s[j + t] - shift);
            s[j + t] = p;
            part[t] += p;
        }
#endif
}

static float *thread_buffer(i64 floats) {
    return aligned_alloc(64, (size_t)round_up(floats * (i64)sizeof(float), 64));
}

// Rows col0.. of a (batch, kv head)'s K or V as a row-major B operand: in place when the head dim
// needs no padding, else copied (zero-padded) into buf. *ld receives its leading dim.
static const float *key_rows(float *buf, const float *x, const i64 *stride, i64 b, i64 hk, i64 col0, i64 cols,
                             i64 d, i64 dp, i64 *ld) {
    const float *src = x + b * stride[0] + hk * stride[1] + col0 * stride[2];
    if (d == dp) {
        *ld = stride[2];
        return src;
    }
    load_rows(buf, dp, src, stride[2], cols, d, cols, 1.0f);
    *ld = dp;
    return buf;
}

void attention_forward(const float *q, const float *k, const float *v, const float *mask, float *o, float *lse,
                       const i64 *dims, float scale, int threads) {
    const attn_dims *dm = (const attn_dims *)dims;
    const i64 d = dm->d, dp = round_up(d, TILE_C), nk_p = round_up(dm->n_k, BLOCK_N);
    const i64 group = dm->heads / dm->kv_heads, m_blocks = (dm->n_q + BLOCK_M - 1) / BLOCK_M;
    const i64 tasks = dm->batch * dm->heads * m_blocks;
    #pragma omp parallel num_threads(threads)
    {
        float *buf = thread_buffer(2 * BLOCK_M * dp + BLOCK_N * dp + BLOCK_M * BLOCK_N + 3 * BLOCK_M + BLOCK_M * TILE_C
                                   + dp * nk_p);
        float *qs = buf, *acc = qs + BLOCK_M * dp, *vs = acc + BLOCK_M * dp;
        float *s = vs + BLOCK_N * dp, *m = s + BLOCK_M * BLOCK_N, *m_new = m + BLOCK_M, *alpha = m_new + BLOCK_M;
        float *l = alpha + BLOCK_M, *kt_cache = l + BLOCK_M * TILE_C;
        i64 cached = -1;
        #pragma omp for schedule(dynamic, 1) nowait  // the region's end is the only barrier (head_panels)
        for (i64 task = 0; task < tasks; ++task) {
            // last query blocks first: with causal masking they are the longest
            const i64 bh = task / m_blocks, b = bh / dm->heads, h = bh % dm->heads, hk = h / group;
            const i64 row0 = (m_blocks - 1 - task % m_blocks) * BLOCK_M, rows = min64(BLOCK_M, dm->n_q - row0);
            const i64 rows_p = round_up(rows, TILE_R);
            load_rows(qs, dp, q + b * dm->q[0] + h * dm->q[1] + row0 * dm->q[2], dm->q[2], rows, d, rows_p,
                      scale * LOG2E);
            memset(acc, 0, sizeof(float) * rows_p * dp);
            for (i64 r = 0; r < rows_p; ++r) m[r] = -INFINITY;
            memset(l, 0, sizeof(float) * rows_p * TILE_C);
            const float *kt = head_panels(kt_cache, &cached, k, dm->k, dm, b, hk, dp);
            const i64 key_end = dm->causal ? min64(dm->n_k, row0 + rows) : dm->n_k;
            for (i64 col0 = 0; col0 < key_end; col0 += BLOCK_N) {
                const i64 cols = min64(BLOCK_N, key_end - col0), cols_p = round_up(cols, TILE_C);
                i64 ldv;
                const float *vb = key_rows(vs, v, dm->v, b, hk, col0, cols, d, dp, &ldv);
                gemm_set(rows_p, cols_p, d, qs, dp, kt + col0 * dp, BLOCK_N, s, BLOCK_N);
                mask_scores(s, dm, mask, b, h, row0, rows, rows_p, col0, cols, cols_p);
                for (i64 r = 0; r < rows_p; ++r) {
                    const float row = row_max(s + r * BLOCK_N, cols_p);
                    m_new[r] = row > m[r] ? row : m[r];
                }
                // the factors that rescale each row's sums, for all rows in one vector loop; a row that has
                // seen no key yet (new max -inf) gets 1 and P = 0 below
                #pragma omp simd
                for (i64 r = 0; r < rows_p; ++r)
                    alpha[r] = m_new[r] == -INFINITY ? 1.0f : exp2_approx(m[r] - m_new[r]);
                for (i64 r = 0; r < rows_p; ++r) {
                    float *srow = s + r * BLOCK_N, *lr = l + r * TILE_C;
                    if (m_new[r] == -INFINITY) {
                        memset(srow, 0, sizeof(float) * cols_p);
                        continue;
                    }
                    if (alpha[r] != 1.0f) {
                        for (int t = 0; t < TILE_C; ++t) lr[t] *= alpha[r];
                        for (i64 c = 0; c < dp; ++c) acc[r * dp + c] *= alpha[r];
                    }
                    exp2_row(srow, cols_p, m_new[r], lr);
                    m[r] = m_new[r];
                }
                gemm_nn(rows_p, dp, cols, s, BLOCK_N, vb, ldv, acc, dp);
            }
            float *oh = o + b * dm->o[0] + h * dm->o[1] + row0 * dm->o[2];
            float *lseh = lse + (b * dm->heads + h) * dm->n_q + row0;
            for (i64 r = 0; r < rows; ++r) {
                float sum = 0.0f;
                for (int t = 0; t < TILE_C; ++t) sum += l[r * TILE_C + t];
                const float inv = sum > 0.0f ? 1.0f / sum : 0.0f;  // sum = 0: the row saw no key
                for (i64 c = 0; c < d; ++c) oh[r * dm->o[2] + c] = acc[r * dp + c] * inv;
                lseh[r] = sum > 0.0f ? (m[r] + log2f(sum)) * LN2 : -INFINITY;
            }
        }
        free(buf);
    }
}

// P = exp2(S·scale·log2 e + mask·log2 e − lse·log2 e) of one (query block, key block) into s, from
// qs (rows_p × dp, unscaled) and the block's Kᵀ panel; lse2 = lse·log2 e, +inf for rows without
// keys (P = 0).
static void probabilities(float *restrict s, const float *qs, const float *kt, const float *lse2,
                          const attn_dims *dm, const float *mask, float scale, i64 b, i64 h, i64 row0, i64 rows,
                          i64 rows_p, i64 col0, i64 cols, i64 cols_p, i64 dp) {
    gemm_set(rows_p, cols_p, dm->d, qs, dp, kt, BLOCK_N, s, BLOCK_N);
    const float mul = scale * LOG2E;
    for (i64 r = 0; r < rows_p; ++r)
        for (i64 j = 0; j < cols_p; ++j) s[r * BLOCK_N + j] *= mul;
    mask_scores(s, dm, mask, b, h, row0, rows, rows_p, col0, cols, cols_p);
    for (i64 r = 0; r < rows_p; ++r) {
        float *srow = s + r * BLOCK_N, shift = lse2[r];
#ifdef EXP2_AVX512
        for (i64 j = 0; j < cols_p; j += 16) store16(srow + j, exp2_16(load16(srow + j) - shift));
#else
        #pragma omp simd
        for (i64 j = 0; j < cols_p; ++j) srow[j] = exp2_approx(srow[j] - shift);
#endif
    }
}

// dS = P∘(dP − delta), into dp_ (which holds dP = dO·Vᵀ, computed here from dos and the Vᵀ panel).
static void score_grads(float *restrict dp_, const float *restrict p, const float *dos, const float *vt,
                        const float *delta, i64 rows_p, i64 cols_p, i64 d, i64 dp) {
    gemm_set(rows_p, cols_p, d, dos, dp, vt, BLOCK_N, dp_, BLOCK_N);
    for (i64 r = 0; r < rows_p; ++r)
        for (i64 j = 0; j < cols_p; ++j)
            dp_[r * BLOCK_N + j] = p[r * BLOCK_N + j] * (dp_[r * BLOCK_N + j] - delta[r]);
}

// Q and dO rows of one query block, their lse·log2 e (+inf for padding rows), and delta =
// rowsum(dO∘O), recomputed per block (D products a row against BLOCK_N·D per product of the block
// pair) instead of once in a pass that every task would wait for.
static void load_query_block(float *qs, float *dos, float *lse2, float *drow, const float *q, const float *o,
                             const float *d_o, const float *lse, const attn_dims *dm, i64 b, i64 h, i64 row0,
                             i64 rows, i64 rows_p, i64 dp) {
    load_rows(qs, dp, q + b * dm->q[0] + h * dm->q[1] + row0 * dm->q[2], dm->q[2], rows, dm->d, rows_p, 1.0f);
    load_rows(dos, dp, d_o + b * dm->d_o[0] + h * dm->d_o[1] + row0 * dm->d_o[2], dm->d_o[2], rows, dm->d, rows_p,
              1.0f);
    const i64 base = (b * dm->heads + h) * dm->n_q + row0;
    const float *orow = o + b * dm->o[0] + h * dm->o[1] + row0 * dm->o[2];
    for (i64 r = 0; r < rows_p; ++r) {
        const float x = r < rows ? lse[base + r] : -INFINITY;
        lse2[r] = x == -INFINITY ? INFINITY : x * LOG2E;
        float sum = 0.0f;
        if (r < rows)
            for (i64 c = 0; c < dm->d; ++c) sum += orow[r * dm->o[2] + c] * dos[r * dp + c];
        drow[r] = sum;
    }
}

// dK and dV of one key block (col0.., cols keys) of kv head (b, hk), from every query block of every
// head of its group; with dq given (the fused backward), dS·K·scale of each block is also added to
// dq's rows (the caller owns those rows: its task holds the whole head group).
static void key_block_grads(const float *q, const float *k, const float *v, const float *mask, const float *o,
                            const float *lse, const float *d_o, float *dq, float *dk, float *dv, const attn_dims *dm,
                            float scale, i64 b, i64 hk, i64 col0, float *buf, i64 dp) {
    const i64 d = dm->d, group = dm->heads / dm->kv_heads, cols = min64(BLOCK_N, dm->n_k - col0);
    const i64 cols_p = round_up(cols, TILE_C);
    float *qs = buf, *dos = qs + BLOCK_M * dp, *dqa = dos + BLOCK_M * dp;
    float *ks = dqa + BLOCK_M * dp, *dka = ks + BLOCK_N * dp, *dva = dka + BLOCK_N * dp;
    float *kt = dva + BLOCK_N * dp, *vt = kt + BLOCK_N * dp;
    float *p = vt + BLOCK_N * dp, *ds = p + BLOCK_M * BLOCK_N, *lse2 = ds + BLOCK_M * BLOCK_N;
    float *drow = lse2 + BLOCK_M;
    transpose_block(kt, k + b * dm->k[0] + hk * dm->k[1], dm->k[2], col0, dm->n_k, d, dp);
    transpose_block(vt, v + b * dm->v[0] + hk * dm->v[1], dm->v[2], col0, dm->n_k, d, dp);
    i64 ldk = 0;
    const float *kb = dq ? key_rows(ks, k, dm->k, b, hk, col0, cols, d, dp, &ldk) : NULL;
    memset(dka, 0, sizeof(float) * cols_p * dp);
    memset(dva, 0, sizeof(float) * cols_p * dp);
    // causal: query i sees key j only if j ≤ i, so rows before col0 see none of this block
    const i64 first = dm->causal ? col0 / BLOCK_M * BLOCK_M : 0;
    for (i64 h = hk * group; h < (hk + 1) * group; ++h) {
        for (i64 row0 = first; row0 < dm->n_q; row0 += BLOCK_M) {
            const i64 rows = min64(BLOCK_M, dm->n_q - row0), rows_p = round_up(rows, TILE_R);
            load_query_block(qs, dos, lse2, drow, q, o, d_o, lse, dm, b, h, row0, rows, rows_p, dp);
            probabilities(p, qs, kt, lse2, dm, mask, scale, b, h, row0, rows, rows_p, col0, cols, cols_p, dp);
            score_grads(ds, p, dos, vt, drow, rows_p, cols_p, d, dp);
            gemm_tn(cols_p, dp, rows, p, BLOCK_N, dos, dp, dva, dp);
            gemm_tn(cols_p, dp, rows, ds, BLOCK_N, qs, dp, dka, dp);
            if (dq) {
                gemm_set(rows_p, dp, cols, ds, BLOCK_N, kb, ldk, dqa, dp);
                float *dqh = dq + b * dm->dq[0] + h * dm->dq[1] + row0 * dm->dq[2];
                for (i64 r = 0; r < rows; ++r)
                    for (i64 c = 0; c < d; ++c) dqh[r * dm->dq[2] + c] += dqa[r * dp + c] * scale;
            }
        }
    }
    float *dkh = dk + b * dm->dk[0] + hk * dm->dk[1] + col0 * dm->dk[2];
    float *dvh = dv + b * dm->dv[0] + hk * dm->dv[1] + col0 * dm->dv[2];
    for (i64 j = 0; j < cols; ++j)
        for (i64 c = 0; c < d; ++c) {
            dkh[j * dm->dk[2] + c] = dka[j * dp + c] * scale;
            dvh[j * dm->dv[2] + c] = dva[j * dp + c];
        }
}

// dQ of one query block (two-pass backward): every key block it sees, from the head's Kᵀ and Vᵀ
// panels (kt, vt) and its K rows.
static void query_block_grads(const float *q, const float *k, const float *mask, const float *o, const float *lse,
                              const float *d_o, float *dq, const float *kt, const float *vt, const attn_dims *dm,
                              float scale, i64 b, i64 h, i64 row0, float *buf, i64 dp) {
    const i64 d = dm->d, hk = h / (dm->heads / dm->kv_heads), rows = min64(BLOCK_M, dm->n_q - row0);
    const i64 rows_p = round_up(rows, TILE_R);
    float *qs = buf, *dos = qs + BLOCK_M * dp, *dqa = dos + BLOCK_M * dp, *ks = dqa + BLOCK_M * dp;
    float *p = ks + 5 * BLOCK_N * dp, *ds = p + BLOCK_M * BLOCK_N, *lse2 = ds + BLOCK_M * BLOCK_N;
    float *drow = lse2 + BLOCK_M;
    load_query_block(qs, dos, lse2, drow, q, o, d_o, lse, dm, b, h, row0, rows, rows_p, dp);
    memset(dqa, 0, sizeof(float) * rows_p * dp);
    const i64 key_end = dm->causal ? min64(dm->n_k, row0 + rows) : dm->n_k;
    for (i64 col0 = 0; col0 < key_end; col0 += BLOCK_N) {
        const i64 cols = min64(BLOCK_N, key_end - col0), cols_p = round_up(cols, TILE_C);
        i64 ldk;
        const float *kb = key_rows(ks, k, dm->k, b, hk, col0, cols, d, dp, &ldk);
        probabilities(p, qs, kt + col0 * dp, lse2, dm, mask, scale, b, h, row0, rows, rows_p, col0, cols, cols_p, dp);
        score_grads(ds, p, dos, vt + col0 * dp, drow, rows_p, cols_p, d, dp);
        gemm_nn(rows_p, dp, cols, ds, BLOCK_N, kb, ldk, dqa, dp);
    }
    float *dqh = dq + b * dm->dq[0] + h * dm->dq[1] + row0 * dm->dq[2];
    for (i64 r = 0; r < rows; ++r)
        for (i64 c = 0; c < d; ++c) dqh[r * dm->dq[2] + c] = dqa[r * dp + c] * scale;
}

// fused: one task per (batch, kv head) computes dK, dV and dQ together (5 products per block pair,
// FlashAttention-2's count), tasks owning whole head groups so that no dQ row is shared; else
// (for calls with fewer kv heads than threads) tasks per (batch, kv head, key block) for dK and dV
// and per (batch, head, query block) for dQ, which computes S and dP again (7 products). Neither
// has a barrier before the end: the tasks read only the inputs.
void attention_backward(const float *q, const float *k, const float *v, const float *mask, const float *o,
                        const float *lse, const float *d_o, float *dq, float *dk, float *dv, const i64 *dims,
                        float scale, int threads, int fused) {
    const attn_dims *dm = (const attn_dims *)dims;
    const i64 dp = round_up(dm->d, TILE_C), nk_p = round_up(dm->n_k, BLOCK_N), group = dm->heads / dm->kv_heads;
    const i64 m_blocks = (dm->n_q + BLOCK_M - 1) / BLOCK_M, n_blocks = (dm->n_k + BLOCK_N - 1) / BLOCK_N;
    #pragma omp parallel num_threads(threads)
    {
        const i64 block_floats = 3 * BLOCK_M * dp + 5 * BLOCK_N * dp + 2 * BLOCK_M * BLOCK_N + 2 * BLOCK_M;
        float *buf = thread_buffer(block_floats + (fused ? 0 : 2 * dp * nk_p));
        if (fused) {
            #pragma omp for schedule(dynamic, 1) nowait
            for (i64 bhk = 0; bhk < dm->batch * dm->kv_heads; ++bhk) {
                const i64 b = bhk / dm->kv_heads, hk = bhk % dm->kv_heads;
                for (i64 h = hk * group; h < (hk + 1) * group; ++h)
                    for (i64 i = 0; i < dm->n_q; ++i)
                        memset(dq + b * dm->dq[0] + h * dm->dq[1] + i * dm->dq[2], 0, sizeof(float) * dm->d);
                for (i64 col0 = 0; col0 < dm->n_k; col0 += BLOCK_N)
                    key_block_grads(q, k, v, mask, o, lse, d_o, dq, dk, dv, dm, scale, b, hk, col0, buf, dp);
            }
        } else {
            #pragma omp for schedule(dynamic, 1) nowait
            for (i64 task = 0; task < dm->batch * dm->kv_heads * n_blocks; ++task) {
                const i64 bhk = task / n_blocks;
                key_block_grads(q, k, v, mask, o, lse, d_o, NULL, dk, dv, dm, scale, bhk / dm->kv_heads,
                                bhk % dm->kv_heads, task % n_blocks * BLOCK_N, buf, dp);
            }
            float *kt_cache = buf + block_floats, *vt_cache = kt_cache + dp * nk_p;
            i64 k_cached = -1, v_cached = -1;
            #pragma omp for schedule(dynamic, 1) nowait
            for (i64 task = 0; task < dm->batch * dm->heads * m_blocks; ++task) {
                const i64 bh = task / m_blocks, b = bh / dm->heads, h = bh % dm->heads, hk = h / group;
                const float *kt = head_panels(kt_cache, &k_cached, k, dm->k, dm, b, hk, dp);
                const float *vt = head_panels(vt_cache, &v_cached, v, dm->v, dm, b, hk, dp);
                query_block_grads(q, k, mask, o, lse, d_o, dq, kt, vt, dm, scale, b, h, task % m_blocks * BLOCK_M, buf,
                                  dp);
            }
        }
        free(buf);
    }
}
