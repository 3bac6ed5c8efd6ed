// Attention backward, FlashAttention-2 on tensor cores (building blocks and layouts: ../_cuda/flash.cuh):
//   attention_backward_delta       delta = rowsum(dO∘O), float32 (B, Hq, Nq);
//   attention_backward_dkdv        one block per (BLOCK_OUTER keys, batch·kv head): loops over the query tiles
//                                  (BLOCK_INNER rows) of every query head of its GQA group, so it owns its rows of
//                                  dK and dV and sums the group for free;
//   attention_backward_dkdv_dq     the same, and per query tile also dQ's share of its keys, dS·K, added to the
//                                  float32 sums dq_accum (B, Hq, Nq, d) by atomics;
//   attention_backward_dq_convert  dq = dq_accum·scale, in T;
//   attention_backward_dq          one block per (BLOCK_OUTER query rows, batch·head): loops over key tiles.
// All recompute P from the forward's lse: P = 2^(S·scale·log2 e − lse·log2 e), and dS = P∘(dP − delta).
//
// Two ways to dQ, both kept: the wrapper's DQ config picks one per shape, by measurement (the tuner).
// - "pass" (delta, dkdv, dq): 7 matrix products per (key tile, query tile) instead of 5, since the dQ pass
//   recomputes S and dP (+40% tensor work); but every product's operands stay in registers or in the pass's own
//   tiles, every gradient is written once by one block, and the result is deterministic (a tuner's
//   verification sees the same bits every run).
// - "atomic" (delta, dkdv_dq, dq_convert): 5 products, against a round trip of dS through shared memory (it
//   comes out of the dK/dV pass's products keys × queries, but dQ = dS·K needs it queries × keys) with a second
//   barrier a step, an fp32 dq_accum (B·Hq·Nq·d·4 bytes, zeroed, and a convert kernel) and red.add traffic of
//   Nk/BLOCK_OUTER times that: at B=4, Hq=32, N=4096, D=128 that is 268 MB accumulated 32 times, 8.6 GB of L2
//   atomics against 2.7 TFLOP of products, i.e. 3 ms at 3 TB/s beside ~9 ms of math, about what the pass's
//   recomputation costs (2/5 of 9 ms). FlashAttention-2's bet is that the REDs, fire-and-forget into L2 (the
//   resident blocks add to ~8 MB of dq_accum at that shape), hide behind the math, which recomputed products
//   cannot.
//
// dK/dV pass, per query tile, in a warp's keys × queries C fragments (transposed products, so that Pᵀ and dSᵀ
// come out as the A operands of dV and dK without leaving registers):
//   Sᵀ = K·Qᵀ, Pᵀ, dV += Pᵀ·dO, dPᵀ = V·dOᵀ, dSᵀ = Pᵀ∘(dPᵀ − delta), dK += dSᵀ·Q;
// with atomic dQ, dSᵀ also goes to a shared tile (as T, rounded as the dK product takes it), and after a barrier
// the block's warps share dQ += dS·K (BLOCK_INNER rows × head dim, over the block's keys: add_dq).
// dQ pass, per key tile, in queries × keys fragments: S = Q·Kᵀ, P, dP = dO·Vᵀ, dS, dQ += dS·K.
// dK and dQ are scaled by the softmax scale once, at the end (atomic dQ's in the convert kernel). Causal: the
// dK/dV pass starts at the query tile holding its first key, the dQ pass stops after its last row's key tile;
// only tiles that straddle the diagonal (and, in the dQ pass, the end of the keys) are masked. Query rows past Nq
// read lse as +inf (P = 0), so they add nothing to dK and dV (nor to dQ); key rows past Nk of the dK/dV pass are
// computed but not stored, and enter the dQ product as zeros (store_ds says why).
//
// WGMMA 1 (Hopper, compiled for sm_90a; atomic dQ, BLOCK_INNER 64, head dims 64 and 128): the dK/dV pass with
// atomic dQ on warpgroup MMAs (../_cuda/wgmma.cuh), dkdv_wgmma below; the tiles are 128-byte swizzled instead of
// padded. The module then holds only the delta, dK/dV-with-dQ and convert kernels.
#ifndef BLOCK_OUTER
#define BLOCK_OUTER 128
#endif
#ifndef BLOCK_INNER
#define BLOCK_INNER 32
#endif
#ifndef WARPS
#define WARPS 8
#endif
#ifndef STAGES
#define STAGES 2
#endif
#ifndef SPLIT
#define SPLIT 0  // the dK/dV pass's warps: 0, each owns 16·MT keys; 1, pairs of warps own 32·MT keys (below)
#endif
#ifndef WGMMA
#define WGMMA 0
#endif
#include "../_cuda/flash.cuh"
#if WGMMA
#include "../_cuda/wgmma.cuh"
#define TILE_ROW HEAD_DIM  // a shared tile's row stride, elements: swizzled, unpadded
#else
#define TILE_ROW LDS
#endif

#define MT (BLOCK_OUTER / (16 * WARPS))  // m16 row tiles per warp
#define NI BLOCK_INNER
#define NT (NI / 8)
#define LDSD (NI + 8)  // row stride of the dSᵀ tile, elements: an odd number of 16-byte chunks, as LDS

static_assert(MT >= 1 && MT * 16 * WARPS == BLOCK_OUTER, "BLOCK_OUTER must be 16·WARPS·MT");
static_assert(!SPLIT || (WARPS % 2 == 0 && HEAD_DIM % 32 == 0), "SPLIT: an even number of warps, HEAD_DIM a multiple of 32");
static_assert(NI % 16 == 0 && 2 * NI <= THREADS && STAGES >= 2, "BLOCK_INNER: a multiple of 16, ≤ THREADS / 2");

// delta[b, h, row] = Σ_col dO·O, 8 threads a row (16-byte chunks 8 apart), 32 rows a block of 256 threads.
// Grid: (ceil(Nq / 32), B·Hq).
extern "C" __global__ void __launch_bounds__(256)
    attention_backward_delta(const T* __restrict__ o, const T* __restrict__ dout, float* __restrict__ delta,
                             i64 o_sb, i64 o_sh, i64 o_sm, i64 do_sb, i64 do_sh, i64 do_sm, int heads, int n_q,
                             int d) {
  const int row = blockIdx.x * 32 + threadIdx.x / 8, part = threadIdx.x % 8;
  const int bh = blockIdx.y, b = bh / heads, h = bh % heads;
  float sum = 0.0f;
  if (row < n_q) {
    const T* po = o + b * o_sb + h * o_sh + row * o_sm;
    const T* pd = dout + b * do_sb + h * do_sh + row * do_sm;
    for (int col = part * 8; col < d; col += 64) {
      const uint4 x = *reinterpret_cast<const uint4*>(po + col), y = *reinterpret_cast<const uint4*>(pd + col);
      const T* xs = reinterpret_cast<const T*>(&x);
      const T* ys = reinterpret_cast<const T*>(&y);
#pragma unroll
      for (int e = 0; e < 8; ++e) sum += kz_to_float(xs[e]) * kz_to_float(ys[e]);
    }
  }
#pragma unroll
  for (int w = 1; w < 8; w *= 2) sum += __shfl_xor_sync(0xffffffffu, sum, w);
  if (part == 0 && row < n_q) delta[(i64)bh * n_q + row] = sum;
}

// Rows row0 .. of a matrix into the shared tile s of ROWS rows (load_rows; WGMMA: load_rows_sw, swizzled).
template <int ROWS>
__device__ __forceinline__ void load_tile(T* s, const T* g, i64 stride, int row0, int n_rows, int d) {
#if WGMMA
  load_rows_sw<ROWS, ROWS, THREADS>(s, g, stride, row0, n_rows, d, threadIdx.x);
#else
  load_rows<ROWS>(s, g, stride, row0, n_rows, d);
#endif
}

// BLOCK_INNER floats of lse and delta of query rows m0 .. into shared memory (zeros past n_q).
__device__ __forceinline__ void load_row_stats(float* s_lse, float* s_delta, const float* lse, const float* delta,
                                               int m0, int n_q) {
  const int t = threadIdx.x % NI;
  const bool ok = m0 + t < n_q;
  if (threadIdx.x < NI) {
    cp_async4(s_lse + t, ok ? lse + m0 + t : lse, ok ? 4 : 0);
  } else if (threadIdx.x < 2 * NI) {
    cp_async4(s_delta + t, ok ? delta + m0 + t : delta, ok ? 4 : 0);
  }
}

// lse·log2 e of a row, +inf for a row that attends no key (lse = -inf) or is past n_q: its P is then 0.
__device__ __forceinline__ float lse_log2(float lse, bool in_range) {
  return in_range && lse != -KZ_INF ? lse * LOG2E : KZ_INF;
}

// A warp's tile of Sᵀ (MR 16-row key tiles by NC query columns from c0; a thread holds columns 8j + 2t and
// 8j + 2t + 1, t = lane % 4), masked and in log2 units, becomes Pᵀ = 2^(Sᵀ − lse·log2 e), lse from the step's
// stage (t_lse, the tile's first column at 0).
template <int MR, int NC>
__device__ __forceinline__ void probabilities_t(float (&p)[MR][NC / 8][4], const float* t_lse, int c0, int n_q) {
  const int lane = threadIdx.x % 32;
#pragma unroll
  for (int j = 0; j < NC / 8; ++j) {
    const int c = j * 8 + lane % 4 * 2;
    const float l0 = lse_log2(t_lse[c], c0 + c < n_q), l1 = lse_log2(t_lse[c + 1], c0 + c + 1 < n_q);
#pragma unroll
    for (int i = 0; i < MR; ++i) {
      p[i][j][0] = ex2(p[i][j][0] - l0);
      p[i][j][1] = ex2(p[i][j][1] - l1);
      p[i][j][2] = ex2(p[i][j][2] - l0);
      p[i][j][3] = ex2(p[i][j][3] - l1);
    }
  }
}

// A dK/dV step's Sᵀ tile of a warp (keys key0 .., query columns c0 .. of the step whose rows start at m0) masked,
// in log2 units, then Pᵀ (probabilities_t). Only a step that straddles the block's keys (its first row before
// the block's last key, n0 + BLOCK_OUTER − 1) pays for the causal mask.
template <int MR, int NC>
__device__ __forceinline__ void step_probabilities_t(float (&p)[MR][NC / 8][4], const float* t_lse, int key0, int c0,
                                                     int m0, int n0, int n_q, int n_k, float scale_log2,
                                                     const AttnMask& am) {
  if (CAUSAL && m0 < n0 + BLOCK_OUTER - 1) {
    mask_scores<true, true, MR, NC>(p, key0, c0, n_q, n_k, scale_log2, am);
  } else {
    mask_scores<false, true, MR, NC>(p, key0, c0, n_q, n_k, scale_log2, am);
  }
  probabilities_t<MR, NC>(p, t_lse, c0, n_q);
}

// dPᵀ in ds (the same tile as probabilities_t's) becomes dSᵀ = Pᵀ∘(dPᵀ − delta), delta from the step's stage.
template <int MR, int NC>
__device__ __forceinline__ void score_grads_t(float (&ds)[MR][NC / 8][4], const float (&p)[MR][NC / 8][4],
                                              const float* t_delta) {
  const int lane = threadIdx.x % 32;
#pragma unroll
  for (int j = 0; j < NC / 8; ++j) {
    const int c = j * 8 + lane % 4 * 2;
    const float d0 = t_delta[c], d1 = t_delta[c + 1];
#pragma unroll
    for (int i = 0; i < MR; ++i) {
      ds[i][j][0] = p[i][j][0] * (ds[i][j][0] - d0);
      ds[i][j][1] = p[i][j][1] * (ds[i][j][1] - d1);
      ds[i][j][2] = p[i][j][2] * (ds[i][j][2] - d0);
      ds[i][j][3] = p[i][j][3] * (ds[i][j][3] - d1);
    }
  }
}

// A warp's dSᵀ (or, SPLIT, Pᵀ) C fragments, M m16 tiles × NC query columns (keys key0 + 16i + g + 8r, queries
// 8j + 2t + e%2), rounded to T as the dK (dV) product takes them, into its rows of the tile s [BLOCK_OUTER][LDSD]
// (s may point at a column) by 4-byte stores (conflict-free as store_rows': the row
// stride LDSD/2 is 4·odd words). Keys past n_k go in as zeros: their P comes from zero-filled K rows against the
// real keys' lse, 2^(−lse·log2 e), which can round to inf in T (lse ≪ 0 under an additive mask), and the dQ
// product would turn inf times those rows' zeros of K into NaN.
template <int M, int NC>
__device__ __forceinline__ void store_ds(const float (&ds)[M][NC / 8][4], T* s, int key0, int n_k) {
  const int lane = threadIdx.x % 32;
#pragma unroll
  for (int i = 0; i < M; ++i)
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const int row = i * 16 + lane / 4 + 8 * r;
      const bool ok = key0 + row < n_k;
#pragma unroll
      for (int j = 0; j < NC / 8; ++j)
        *reinterpret_cast<unsigned*>(s + row * LDSD + j * 8 + lane % 4 * 2) =
            ok ? pack_pair(ds[i][j][2 * r], ds[i][j][2 * r + 1], T{}) : 0u;
    }
}

// dst[0] += x, dst[1] += y (dst 8-byte aligned) by float32 atomics whose results are unused, so that they compile
// to REDs: one REDG.E.ADD.F32x2 on sm_90, two 4-byte ones before.
__device__ __forceinline__ void red_add2(float* dst, float x, float y) {
#if __CUDA_ARCH__ >= 900
  atomicAdd(reinterpret_cast<float2*>(dst), make_float2(x, y));
#else
  atomicAdd(dst, x);
  atomicAdd(dst + 1, y);
#endif
}

// The split of a step's dQ product (BLOCK_INNER rows × HEAD_DIM) over the warps: wm warps along the rows (m16
// tiles) by WARPS/wm along the head dim (16-column pairs, one ldmatrix.x4.trans of K each). A warp loads the A
// fragments of each of its row tiles and the B fragments of each of its pairs once per k16 step; the split chosen
// issues the fewest mma per warp, then loads the fewest fragments: at BLOCK_INNER 32 and 8 warps, 1 × 8 at head
// dim 128 (a warp: 2 row tiles × 1 pair, 3 loads for 4 mma a step) and 2 × 4 at 64 (1 × 1).
__device__ constexpr int dq_pairs(int wm) { return (KD + WARPS / wm - 1) / (WARPS / wm); }
__device__ constexpr int dq_mma(int wm) { return NI / 16 / wm * dq_pairs(wm); }
__device__ constexpr int dq_loads(int wm) { return NI / 16 / wm + dq_pairs(wm); }
__device__ constexpr int dq_warp_rows() {
  int best = 1;
  for (int wm = 2; wm <= WARPS && NI / 16 % wm == 0; wm *= 2)
    if (dq_mma(wm) < dq_mma(best) || (dq_mma(wm) == dq_mma(best) && dq_loads(wm) < dq_loads(best))) best = wm;
  return best;
}

// add_dq's sums of rows row0 .. (16·MW of them) added into dq: one pointer a row, the columns as constant offsets
// from it; CHECKED drops rows ≥ n_q and columns ≥ d.
template <bool CHECKED, int MW, int NP, int WN>
__device__ __forceinline__ void add_rows(const float (&acc)[MW][2 * NP][4], float* dq, int row0, int wn, int n_q,
                                         int d) {
  const int lane = threadIdx.x % 32, col0 = wn * 16 + lane % 4 * 2;
#pragma unroll
  for (int r = 0; r < MW; ++r)
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int row = row0 + r * 16 + lane / 4 + 8 * half;
      if (CHECKED && row >= n_q) continue;
      float* at = dq + (i64)row * d + col0;
#pragma unroll
      for (int n = 0; n < 2 * NP; ++n) {
        const int offset = n / 2 * WN * 16 + n % 2 * 8;  // inside the head dim's pairs
        if ((KD % WN == 0 || wn + n / 2 * WN < KD) && (!CHECKED || col0 + offset < d))
          red_add2(at + offset, acc[r][n][2 * half], acc[r][n][2 * half + 1]);
      }
    }
}

// One step's share of dQ, dS·K, added in float32 to rows m0 .. of one head's dq (rows of d floats, contiguous;
// rows ≥ n_q and columns ≥ d are not added): dS (NI queries × BLOCK_OUTER keys) from the dSᵀ tile sds, K (keys ×
// head dim) from sk. Warp w computes rows row0 = 16·MW·(w % WM) .. row0 + 16·MW - 1 of the step, and columns
// 16c .. 16c+15 for its pairs c = w / WM + WN·s below KD. Per k16 step kc (keys 16kc ..):
// A of row tile r (queries row0 + 16r ..) from sds, which holds it transposed (row = key): lane l points at row
// 16kc + 8·(l/16) + l%8, column row0 + 16r + 8·((l/8)%2), so the four matrices are (keys 0-7, queries 0-7),
// (keys 0-7, queries 8-15), (keys 8-15, queries 0-7), (keys 8-15, queries 8-15); .trans gives lane l column g,
// rows 2t, 2t+1 of each, i.e. query g (or g+8) and keys 2t, 2t+1 (or +8), the lower key in the low half: a0,
// a1, a2, a3 of the mma. B of pair c from sk (row = key, as accumulate reads V): lane l points at row 16kc + l%16,
// column 16c + 8·(l/16), so the matrices are (keys 0-7, columns 0-7), (keys 8-15, columns 0-7), (keys 0-7,
// columns 8-15), (keys 8-15, columns 8-15); .trans gives lane l column g and keys 2t, 2t+1 (or +8): b0, b1 of n8
// tile 2c, then of 2c+1. The C fragments give lane l rows g and g+8, columns 2t and 2t+1: one 8-byte RED each.
__device__ __forceinline__ void add_dq(const T* sds, const T* sk, float* dq, int m0, int n_q, int d) {
  constexpr int WM = dq_warp_rows(), WN = WARPS / WM, MW = NI / 16 / WM, NP = dq_pairs(WM);
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, wn = warp / WM, row0 = warp % WM * MW * 16;
  if (wn >= KD) return;  // more warps along the head dim than pairs: this one has none
  float acc[MW][2 * NP][4];  // rows row0 + 16r + g + 8·(e/2), columns 16(wn + WN·(n/2)) + 8·(n%2) + 2t + e%2
  zero(acc);
#pragma unroll
  for (int kc = 0; kc < BLOCK_OUTER / 16; ++kc) {
    unsigned a[MW][4];
#pragma unroll
    for (int r = 0; r < MW; ++r)
      ldmatrix_x4_trans(a[r], sds + (kc * 16 + lane / 16 * 8 + lane % 8) * LDSD + row0 + r * 16 + lane / 8 % 2 * 8);
#pragma unroll
    for (int s = 0; s < NP; ++s) {
      const int c = wn + s * WN;
      if (KD % WN == 0 || c < KD) {
        unsigned b[4];
        ldmatrix_x4_trans(b, sk + (kc * 16 + lane % 16) * LDS + c * 16 + lane / 16 * 8);
#pragma unroll
        for (int r = 0; r < MW; ++r) {
          mma_16816(acc[r][2 * s], a[r], b, T{});
          mma_16816(acc[r][2 * s + 1], a[r], b + 2, T{});
        }
      }
    }
  }
  // A step whose rows all exist, at a head dim the kernel's fills (the common case), adds with no checks and no
  // branch around each add.
  if (m0 + NI <= n_q && d == HEAD_DIM) {
    add_rows<false, MW, NP, WN>(acc, dq, m0 + row0, wn, n_q, d);
  } else {
    add_rows<true, MW, NP, WN>(acc, dq, m0 + row0, wn, n_q, d);
  }
}

// q and do (B, Hq, Nq, d), k and v (B, Hk, Nk, d), dk and dv like k: element (b, h, row, col) at b·sb + h·sh +
// row·sm (sn for keys) + col, strides in elements (multiples of 8, pointers 16-byte aligned). lse, delta:
// float32 (B, Hq, Nq), contiguous. dq_accum: float32 (B, Hq, Nq, d) contiguous and zeroed, for
// attention_backward_dkdv_dq (attention_backward_dkdv ignores it). Grid: (ceil(Nk / BLOCK_OUTER), B·Hk); dynamic
// shared memory 2·(BLOCK_OUTER + STAGES·BLOCK_INNER)·LDS elements + 2·STAGES·BLOCK_INNER floats, and
// attention_backward_dkdv_dq BLOCK_OUTER·LDSD elements more (WGMMA: rows of HEAD_DIM for LDS, BLOCK_OUTER·64
// elements for the dSᵀ tile, 1024 bytes more to align the tiles, and BLOCK_INNER·HEAD_DIM floats for dQ's).
#define DKDV_PARAMS                                                                                              \
  const T* __restrict__ q, const T* __restrict__ k, const T* __restrict__ v, const MASK_T* __restrict__ mask,     \
      const T* __restrict__ dout, const float* __restrict__ lse, const float* __restrict__ delta,                \
      T* __restrict__ dk, T* __restrict__ dv, float* __restrict__ dq_accum, i64 q_sb, i64 q_sh, i64 q_sm,       \
      i64 k_sb, i64 k_sh, i64 k_sn, i64 v_sb, i64 v_sh, i64 v_sn, i64 do_sb, i64 do_sh, i64 do_sm, i64 dk_sb,   \
      i64 dk_sh, i64 dk_sn, i64 dv_sb, i64 dv_sh, i64 dv_sn, i64 mask_sb, i64 mask_sh, i64 mask_sm,             \
      i64 mask_sn, int heads, int kv_heads, int group, int n_q, int n_k, int d, float scale_log2, float scale
// The kernels own the dynamic shared memory's declaration: one inside the template would have C++ linkage
// against their C one.
#define DKDV_BODY(DQ_ATOMIC)                                    \
  extern __shared__ __align__(16) unsigned char smem[];         \
  DKDV_PASS<DQ_ATOMIC>(smem, DKDV_ARGS)

// What the two dK/dV passes share: the tiles at the start of shared memory, the walk of their steps and the
// steps' loads. Steps it = 0 .. total-1 walk the query tiles qt0 .. n_qt-1 of each head of the block's GQA group in
// turn; causal: the tiles before the one holding query row n0 see none of its keys (a tile needs the causal mask
// while its first row is before the block's last key). begin() issues k and v with step 0, then one cp.async group
// per step (empty ones too): when step it is used, groups 0 .. it are complete.
struct DkdvSteps {
  T* sk;          // [BLOCK_OUTER][TILE_ROW]: k, then dk on its way out
  T* sv;          // [BLOCK_OUTER][TILE_ROW]: v, then dv
  T* sq;          // [STAGES][NI][TILE_ROW]
  T* sdo;         // [STAGES][NI][TILE_ROW]
  T* sds;         // [BLOCK_OUTER][LDSD]: a step's dSᵀ (atomic dQ, and dkdv_split; WGMMA: [BLOCK_OUTER][64])
  float* s_lse;   // [STAGES][NI]
  float* s_delta; // [STAGES][NI]
  int n0, b, hk, qt0, per_head, total;
  const T* q;
  const T* dout;
  const float* lse;
  const float* delta;
  i64 q_sb, q_sh, q_sm, do_sb, do_sh, do_sm;
  int heads, group, n_q, d;

  __device__ __forceinline__ int head(int it) const { return hk * group + it / per_head; }
  __device__ __forceinline__ int row0(int it) const { return (qt0 + it % per_head) * NI; }

  // step it's q and dO tiles, lse and delta into stage st
  __device__ __forceinline__ void load(int it, int st) const {
    const int h = head(it), m0 = row0(it);
    const i64 stats = (i64)(b * heads + h) * n_q;
    load_tile<NI>(sq + st * NI * TILE_ROW, q + b * q_sb + h * q_sh, q_sm, m0, n_q, d);
    load_tile<NI>(sdo + st * NI * TILE_ROW, dout + b * do_sb + h * do_sh, do_sm, m0, n_q, d);
    load_row_stats(s_lse + st * NI, s_delta + st * NI, lse + stats, delta + stats, m0, n_q);
  }
};

__device__ __forceinline__ DkdvSteps dkdv_begin(unsigned char* smem, DKDV_PARAMS) {
  DkdvSteps s;
#if WGMMA
  s.sk = reinterpret_cast<T*>(smem + (1024 - smem_addr(smem) % 1024) % 1024);  // every tile 1024-byte aligned
  s.sds = s.sk + 2 * (BLOCK_OUTER + STAGES * NI) * TILE_ROW;
  s.s_lse = reinterpret_cast<float*>(s.sds + BLOCK_OUTER * 64);
#else
  s.sk = reinterpret_cast<T*>(smem);
  s.s_lse = reinterpret_cast<float*>(s.sk + 2 * (BLOCK_OUTER + STAGES * NI) * TILE_ROW);
  s.sds = reinterpret_cast<T*>(s.s_lse + 2 * STAGES * NI);  // last: the pass without it has no room for it
#endif
  s.sv = s.sk + BLOCK_OUTER * TILE_ROW;
  s.sq = s.sv + BLOCK_OUTER * TILE_ROW;
  s.sdo = s.sq + STAGES * NI * TILE_ROW;
  s.s_delta = s.s_lse + STAGES * NI;
  s.n0 = blockIdx.x * BLOCK_OUTER;
  s.b = blockIdx.y / kv_heads;
  s.hk = blockIdx.y % kv_heads;
  const int n_qt = (n_q + NI - 1) / NI;
  s.qt0 = CAUSAL ? s.n0 / NI : 0;
  s.per_head = n_qt > s.qt0 ? n_qt - s.qt0 : 0;
  s.total = group * s.per_head;
  s.q = q, s.dout = dout, s.lse = lse, s.delta = delta;
  s.q_sb = q_sb, s.q_sh = q_sh, s.q_sm = q_sm, s.do_sb = do_sb, s.do_sh = do_sh, s.do_sm = do_sm;
  s.heads = heads, s.group = group, s.n_q = n_q, s.d = d;
  load_tile<BLOCK_OUTER>(s.sk, k + s.b * k_sb + s.hk * k_sh, k_sn, s.n0, n_k, d);
  load_tile<BLOCK_OUTER>(s.sv, v + s.b * v_sb + s.hk * v_sh, v_sn, s.n0, n_k, d);
#pragma unroll
  for (int st = 0; st < STAGES - 1; ++st) {
    if (st < s.total) s.load(st, st);
    cp_async_commit();
  }
  return s;
}

#define DKDV_ARGS                                                                                                \
  q, k, v, mask, dout, lse, delta, dk, dv, dq_accum, q_sb, q_sh, q_sm, k_sb, k_sh, k_sn, v_sb, v_sh, v_sn, do_sb, \
      do_sh, do_sm, dk_sb, dk_sh, dk_sn, dv_sb, dv_sh, dv_sn, mask_sb, mask_sh, mask_sm, mask_sn, heads, kv_heads,  \
      group, n_q, n_k, d, scale_log2, scale

template <bool DQ_ATOMIC>
__device__ __forceinline__ void dkdv_pass(unsigned char* smem, DKDV_PARAMS) {
  const DkdvSteps steps = dkdv_begin(smem, DKDV_ARGS);
  T *sk = steps.sk, *sv = steps.sv, *sq = steps.sq, *sdo = steps.sdo, *sds = steps.sds;
  const float *s_lse = steps.s_lse, *s_delta = steps.s_delta;
  const int warp = threadIdx.x / 32;
  const int n0 = steps.n0, b = steps.b, hk = steps.hk, total = steps.total;
  const int wrow = warp * MT * 16;

  float dk_acc[MT][ND][4], dv_acc[MT][ND][4];
  zero(dk_acc);
  zero(dv_acc);
  for (int it = 0; it < total; ++it) {
    cp_async_wait<STAGES - 2>();  // step it landed (this thread's part); the barrier: everyone's, and the
    __syncthreads();              // stage read in step it-1 (and sds) is free
    const int next = it + STAGES - 1;
    if (next < total) steps.load(next, next % STAGES);
    cp_async_commit();

    const int st = it % STAGES, h = steps.head(it), m0 = steps.row0(it);
    const T* tq = sq + st * NI * LDS;
    const T* tdo = sdo + st * NI * LDS;
    const float* t_lse = s_lse + st * NI;
    const float* t_delta = s_delta + st * NI;
    const AttnMask am{mask + b * mask_sb + h * mask_sh, mask_sm, mask_sn};

    float p[MT][NT][4];  // Sᵀ, then Pᵀ: rows keys n0 + wrow + 16i + g + 8r, columns queries m0 + 8j + 2t + e%2
    scores_smem<MT, NI>(p, sk + wrow * LDS, tq);
    step_probabilities_t<MT, NI>(p, t_lse, n0 + wrow, m0, m0, n0, n_q, n_k, scale_log2, am);
    accumulate<MT, NI>(dv_acc, p, tdo);

    float ds[MT][NT][4];  // dPᵀ, then dSᵀ
    scores_smem<MT, NI>(ds, sv + wrow * LDS, tdo);
    score_grads_t<MT, NI>(ds, p, t_delta);
    if (DQ_ATOMIC) store_ds<MT, NI>(ds, sds + wrow * LDSD, n0 + wrow, n_k);
    accumulate<MT, NI>(dk_acc, ds, tq);
    if (DQ_ATOMIC) {
      __syncthreads();  // every warp's rows of dSᵀ are in sds
      add_dq(sds, sk, dq_accum + (i64)(b * heads + h) * n_q * d, m0, n_q, d);
    }
  }
  cp_async_wait<0>();
  __syncthreads();  // with no step at all, k and v may still be landing in rows other warps stage below; with
                    // atomic dQ, other warps may still be reading every row of sk

  // Each warp's own rows of sk and sv (the only ones its products read as A operands) are its stages now.
  scale_rows<MT>(dk_acc, scale);
  store_rows<MT>(dk_acc, sk + wrow * LDS, dk + b * dk_sb + hk * dk_sh, dk_sn, n0 + wrow, n_k, d);
  store_rows<MT>(dv_acc, sv + wrow * LDS, dv + b * dv_sb + hk * dv_sh, dv_sn, n0 + wrow, n_k, d);
}

#if SPLIT
// --- SPLIT: pairs of warps ------------------------------------------------------------------------------------
// With 16 keys a warp, every warp reads the whole q and dO tiles of a step as B operands of its four products:
// 704 KiB of ldmatrix a step at 128 keys × 64 queries × head dim 128 over 8 warps (docs/design/flash-attention.md).
// SPLIT pairs the warps: warp w owns keys 32·MT·(w/2) .. (MS = 2·MT m16 tiles) and head-dim half w%2 of their dK
// and dV (the same accumulator registers as 16 keys × the whole head dim). A warp computes Sᵀ and dPᵀ for its keys
// × query half w%2 of the step, writes Pᵀ and dSᵀ (rounded to T, as the products take them) to shared tiles, and
// after a barrier takes both halves from there as the A operands of dV += Pᵀ·dO and dK += dSᵀ·Q over its head-dim
// half: 544 KiB of reads a step and 32 KiB of tile writes.
#define MS (2 * MT)
#define NH (NI / 2)        // a warp's query columns of Sᵀ and dPᵀ
#define NDH (ND / 2)       // a warp's n8 tiles of the head dim in dK and dV

// acc += A·B over NI queries: A (16·MS keys × NI) the warp's rows of the shared tile sa [..][LDSD], B the tile
// sb [NI][LDS] from column 16·NDH·half (ldmatrix.trans, as accumulate_packed; A by ldmatrix as a_fragments).
__device__ __forceinline__ void accumulate_tile(float (&acc)[MS][NDH][4], const T* sa, const T* sb) {
  const int lane = threadIdx.x % 32;
#pragma unroll
  for (int c = 0; c < NI / 16; ++c) {
    unsigned a[MS][4];
#pragma unroll
    for (int i = 0; i < MS; ++i) ldmatrix_x4(a[i], sa + (i * 16 + lane % 16) * LDSD + c * 16 + lane / 16 * 8);
#pragma unroll
    for (int jd = 0; jd < NDH; jd += 2) {
      unsigned b[4];
      ldmatrix_x4_trans(b, sb + (c * 16 + lane % 16) * LDS + jd * 8 + lane / 16 * 8);
#pragma unroll
      for (int i = 0; i < MS; ++i) {
        mma_16816(acc[i][jd], a[i], b, T{});
        mma_16816(acc[i][jd + 1], a[i], b + 2, T{});
      }
    }
  }
}

// The warp's head-dim half of its rows (16·MS × 8·NDH from column col0) rounded to T and stored as store_rows
// does, through the same columns of its rows of the shared tile stage (its partner stages the other half).
__device__ __forceinline__ void store_half(const float (&acc)[MS][NDH][4], float f, T* stage, T* g, i64 stride,
                                           int row0, int n_rows, int col0, int d) {
  const int lane = threadIdx.x % 32;
#pragma unroll
  for (int i = 0; i < MS; ++i)
#pragma unroll
    for (int jd = 0; jd < NDH; ++jd) {
      T* p = stage + (i * 16 + lane / 4) * LDS + col0 + jd * 8 + lane % 4 * 2;
      *reinterpret_cast<unsigned*>(p) = pack_pair(acc[i][jd][0] * f, acc[i][jd][1] * f, T{});
      *reinterpret_cast<unsigned*>(p + 8 * LDS) = pack_pair(acc[i][jd][2] * f, acc[i][jd][3] * f, T{});
    }
  __syncwarp();
#pragma unroll
  for (int c = lane; c < MS * 16 * NDH; c += 32) {
    const int r = c / NDH, col = col0 + c % NDH * 8;
    if (row0 + r < n_rows && col < d)
      *reinterpret_cast<uint4*>(g + (row0 + r) * stride + col) = *reinterpret_cast<const uint4*>(stage + r * LDS + col);
  }
}

template <bool DQ_ATOMIC>
__device__ __forceinline__ void dkdv_split(unsigned char* smem, DKDV_PARAMS) {
  const DkdvSteps steps = dkdv_begin(smem, DKDV_ARGS);
  T *sk = steps.sk, *sv = steps.sv, *sq = steps.sq, *sdo = steps.sdo, *sds = steps.sds;
  T* sp = sds + BLOCK_OUTER * LDSD;  // [BLOCK_OUTER][LDSD]: a step's Pᵀ
  const float *s_lse = steps.s_lse, *s_delta = steps.s_delta;
  const int warp = threadIdx.x / 32, half = warp % 2;
  const int n0 = steps.n0, b = steps.b, hk = steps.hk, total = steps.total;
  const int wrow = warp / 2 * MS * 16;

  float dk_acc[MS][NDH][4], dv_acc[MS][NDH][4];
  zero(dk_acc);
  zero(dv_acc);
  for (int it = 0; it < total; ++it) {
    cp_async_wait<STAGES - 2>();
    __syncthreads();  // step it landed; the stage, sp and sds of step it-1 are free
    const int next = it + STAGES - 1;
    if (next < total) steps.load(next, next % STAGES);
    cp_async_commit();

    const int st = it % STAGES, h = steps.head(it), m0 = steps.row0(it);
    const T* tq = sq + st * NI * LDS;
    const T* tdo = sdo + st * NI * LDS;
    const float* t_lse = s_lse + st * NI + half * NH;
    const float* t_delta = s_delta + st * NI + half * NH;
    const int c0 = m0 + half * NH;  // this warp's first query column
    const AttnMask am{mask + b * mask_sb + h * mask_sh, mask_sm, mask_sn};

    float p[MS][NH / 8][4];  // Sᵀ, then Pᵀ: keys n0 + wrow + 16i + g + 8r, queries c0 + 8j + 2t + e%2
    scores_smem<MS, NH>(p, sk + wrow * LDS, tq + half * NH * LDS);
    step_probabilities_t<MS, NH>(p, t_lse, n0 + wrow, c0, m0, n0, n_q, n_k, scale_log2, am);
    store_ds<MS, NH>(p, sp + wrow * LDSD + half * NH, n0 + wrow, n_k);

    float ds[MS][NH / 8][4];  // dPᵀ, then dSᵀ
    scores_smem<MS, NH>(ds, sv + wrow * LDS, tdo + half * NH * LDS);
    score_grads_t<MS, NH>(ds, p, t_delta);
    store_ds<MS, NH>(ds, sds + wrow * LDSD + half * NH, n0 + wrow, n_k);
    __syncthreads();  // both query halves of every pair's Pᵀ and dSᵀ are in sp and sds

    accumulate_tile(dv_acc, sp + wrow * LDSD, tdo + half * NDH * 8);
    accumulate_tile(dk_acc, sds + wrow * LDSD, tq + half * NDH * 8);
    if (DQ_ATOMIC) add_dq(sds, sk, dq_accum + (i64)(b * heads + h) * n_q * d, m0, n_q, d);
  }
  cp_async_wait<0>();
  __syncthreads();  // as dkdv_pass's: k and v landed, and no warp reads sk any more

  // Each pair's own rows of sk and sv are its stages now, a column half each.
  store_half(dk_acc, scale, sk + wrow * LDS, dk + b * dk_sb + hk * dk_sh, dk_sn, n0 + wrow, n_k, half * NDH * 8, d);
  store_half(dv_acc, 1.0f, sv + wrow * LDS, dv + b * dv_sb + hk * dv_sh, dv_sn, n0 + wrow, n_k, half * NDH * 8, d);
}
#define DKDV_PASS dkdv_split
#else
#define DKDV_PASS dkdv_pass
#endif

#if WGMMA
// --- WGMMA: the dK/dV pass with atomic dQ on warpgroup MMAs ----------------------------------------------------
// Each warpgroup (4 warps) owns 64 keys of the block (BLOCK_OUTER = 16·WARPS) and a step is 64 query rows. Per
// step, in a warpgroup's keys × queries accumulators (warp w of it holds rows 16w.. as mma.sync's C fragments, so
// mask_scores, probabilities_t and score_grads_t work on them unchanged):
//   Sᵀ = K·Qᵀ and dPᵀ = V·dOᵀ (ss: the warpgroup's K or V rows and the step's q or dO tile, all K-major), issued
//   together as two groups;
//   once Sᵀ lands: Pᵀ, and dV += Pᵀ·dO issued (rs: Pᵀ packed to T in registers, dO MN-major), which runs while
//   dSᵀ = Pᵀ∘(dPᵀ − delta) is computed once dPᵀ lands; dK += dSᵀ·Q issued the same way;
//   dSᵀ (T, rounded as dK takes it) into the swizzled tile sds, and after a barrier of the block, dQ's share of
//   the step: dS·K over all the block's keys (ss, both MN-major: sds read transposed as A, the K tile as B), the
//   head dim split over the warpgroups (DQ_N columns each), stored to shared memory in the accumulators' own
//   order (below), from which the TMA unit adds it to dq_accum, one bulk reduction a warpgroup.
// One block barrier a step frees the stage of the step before (every wgmma that read it has been waited for).
//
// dq_accum holds each 64-row tile of a head's dQ in that order: (B, Hq, ceil(Nq / 64), 64·HEAD_DIM) float32, a
// warpgroup's share of a tile a contiguous chunk of DQ_CHUNK floats, in which thread τ's accumulators 4κ .. 4κ+3
// lie at floats 4·(128κ + τ) (16-byte stores, a warp's consecutive: no bank conflict). The convert kernel puts
// the rows and columns back. The bulk reductions replace 8-byte REDs, 16 a thread a step at head dim 128, which
// cost over a quarter of the pass's time; one reduction a row from a padded tile was slower still
// (docs/design/flash-attention.md).
#define NWG (WARPS / 4)
#define DQ_N (HEAD_DIM / NWG)                  // dQ columns a warpgroup
#define OUTER_BLOCK_UNITS (BLOCK_OUTER * 128 / 16)  // a 64-column block of the K or V tile, in 16-byte units
#define INNER_BLOCK_UNITS (NI * 128 / 16)           // of a q or dO tile
#define STEP_UNITS (NI * HEAD_DIM * 2 / 16)         // a stage of q or dO
#define DQ_CHUNK (NI * DQ_N)  // floats of a warpgroup's dQ share of a step
static_assert(MT == 1 && NI == 64 && HEAD_DIM % 64 == 0 && (NWG == 1 || NWG == 2) && !SPLIT,
              "WGMMA: 64 keys a warpgroup (BLOCK_OUTER = 16·WARPS, 4 or 8 warps), 64-row steps, head dims 64 and 128");
static_assert(BLOCK_OUTER * LDS <= 2 * STAGES * NI * HEAD_DIM, "dK and dV are staged in the q and dO stages");

// A warp's dSᵀ (16 keys from row `wrow` of the block × the step's 64 queries) rounded to T into the swizzled tile
// sds [BLOCK_OUTER][64] (chunk c of row r at c ^ r % 8; a warp's 4-byte stores hit 32 distinct banks); keys past
// n_k go in as zeros, as store_ds says why.
__device__ __forceinline__ void store_ds_sw(const float (&ds)[1][NT][4], T* sds, int wrow, int n0, int n_k) {
  const int lane = threadIdx.x % 32, g = lane / 4;
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int row = wrow + g + 8 * r;
    const bool ok = n0 + row < n_k;
#pragma unroll
    for (int j = 0; j < NT; ++j)
      *reinterpret_cast<unsigned*>(sds + row * 64 + (j ^ g) * 8 + lane % 4 * 2) =
          ok ? pack_pair(ds[0][j][2 * r], ds[0][j][2 * r + 1], T{}) : 0u;
  }
}

// A warpgroup's dQ share of a step (accumulators as wgmma_ss's) into its chunk of shared memory, in their order.
__device__ __forceinline__ void store_dq(const float (&acc)[DQ_N / 2], float* chunk) {
  const int tid = threadIdx.x % 128;
#pragma unroll
  for (int k = 0; k < DQ_N / 8; ++k)
    *reinterpret_cast<float4*>(chunk + 4 * (128 * k + tid)) =
        make_float4(acc[4 * k], acc[4 * k + 1], acc[4 * k + 2], acc[4 * k + 3]);
}

__device__ __forceinline__ void dkdv_wgmma(unsigned char* smem, DKDV_PARAMS) {
  const DkdvSteps steps = dkdv_begin(smem, DKDV_ARGS);
  T *sk = steps.sk, *sv = steps.sv, *sq = steps.sq, *sdo = steps.sdo, *sds = steps.sds;
  const float *s_lse = steps.s_lse, *s_delta = steps.s_delta;
  const int warp = threadIdx.x / 32, wg = warp / 4;
  const int n0 = steps.n0, b = steps.b, hk = steps.hk, total = steps.total;
  const int wrow = warp * 16, col0 = wg * DQ_N;
  float* sdq = steps.s_delta + STAGES * NI + wg * DQ_CHUNK;  // the warpgroup's dQ share, on its way to dq_accum
  const bool reducer = threadIdx.x % 128 == 0;  // the thread of its warpgroup that issues the bulk reductions
  const int m_tiles = (n_q + NI - 1) / NI;

  // Descriptors (steps and stages move only the start address): the warpgroup's K and V rows (K-major A); a
  // stage's q and dO tiles as K-major B (Sᵀ, dPᵀ) and as MN-major B (dK, dV: 64-column blocks NI lines apart);
  // dSᵀ as MN-major A (one 64-query block) and the K tile from column col0 as MN-major B (dQ).
  const u64 k_desc = sw128_desc(sk + wg * 64 * 64, 16), v_desc = sw128_desc(sv + wg * 64 * 64, 16);
  const u64 q_rows = sw128_desc(sq, 16), do_rows = sw128_desc(sdo, 16);
  const u64 q_cols = sw128_desc(sq, NI * 128), do_cols = sw128_desc(sdo, NI * 128);
  const u64 ds_desc = sw128_desc(sds, NI * 128);
  const u64 kq_desc = sw128_desc(sk + col0 / 64 * BLOCK_OUTER * 64 + col0 % 64, BLOCK_OUTER * 128);

  float dk_acc[1][ND][4], dv_acc[1][ND][4];
  zero(dk_acc);
  zero(dv_acc);
  float (&dk_flat)[ND * 4] = reinterpret_cast<float (&)[ND * 4]>(dk_acc);
  float (&dv_flat)[ND * 4] = reinterpret_cast<float (&)[ND * 4]>(dv_acc);
  for (int it = 0; it < total; ++it) {
    cp_async_wait<STAGES - 2>();  // step it landed (this thread's chunks), for the wgmma reads after the barrier,
    fence_proxy_async();          // which also frees the stage and sds of step it-1
    __syncthreads();
    const int next = it + STAGES - 1;
    if (next < total) steps.load(next, next % STAGES);
    cp_async_commit();

    const int st = it % STAGES, stage = st * STEP_UNITS, h = steps.head(it), m0 = steps.row0(it);
    const float* t_lse = s_lse + st * NI;
    const float* t_delta = s_delta + st * NI;
    const AttnMask am{mask + b * mask_sb + h * mask_sh, mask_sm, mask_sn};

    float p[1][NT][4], ds[1][NT][4];  // Sᵀ then Pᵀ, dPᵀ then dSᵀ: keys n0 + wrow + g + 8r, queries m0 + 8j + 2t + e%2
    float (&p_flat)[NT * 4] = reinterpret_cast<float (&)[NT * 4]>(p);
    float (&ds_flat)[NT * 4] = reinterpret_cast<float (&)[NT * 4]>(ds);
    wgmma_fence();
    wgmma_over_head_dim(p_flat, k_desc, OUTER_BLOCK_UNITS, q_rows + stage, INNER_BLOCK_UNITS);
    wgmma_commit();
    wgmma_over_head_dim(ds_flat, v_desc, OUTER_BLOCK_UNITS, do_rows + stage, INNER_BLOCK_UNITS);
    wgmma_commit();
    wgmma_wait<1>();
    fence_operands(p_flat);
    step_probabilities_t<1, NI>(p, t_lse, n0 + wrow, m0, m0, n0, n_q, n_k, scale_log2, am);
    unsigned pa[1][NI / 16][4];
    pack_p<1, NI>(pa, p);
    wgmma_fence();
    wgmma_over_rows(dv_flat, pa, do_cols + stage);  // over the step's queries
    wgmma_commit();

    wgmma_wait<1>();  // dPᵀ (dV may still run)
    fence_operands(ds_flat);
    score_grads_t<1, NI>(ds, p, t_delta);
    store_ds_sw(ds, sds, wrow, n0, n_k);
    unsigned dsa[1][NI / 16][4];
    pack_p<1, NI>(dsa, ds);
    wgmma_fence();
    wgmma_over_rows(dk_flat, dsa, q_cols + stage);
    wgmma_commit();

    fence_proxy_async();  // this thread's dSᵀ stores, for the dQ product's reads after the barrier
    if (reducer) bulk_wait_read<0>();  // the last step's reductions have read sdq: it is free past the barrier
    named_barrier(1, THREADS);
    float dq[DQ_N / 2];
    wgmma_fence();
#pragma unroll
    for (int kc = 0; kc < BLOCK_OUTER / 16; ++kc)
      wgmma_ss<1, 1>(dq, ds_desc + kc * 16 * 128 / 16, kq_desc + kc * 16 * 128 / 16, kc > 0, T{});
    wgmma_commit();
    wgmma_wait<0>();
    fence_operands(dq);
    fence_operands(dk_flat);
    fence_operands(dv_flat);
    fence_operands(pa);
    fence_operands(dsa);
    store_dq(dq, sdq);
    fence_proxy_async();  // the stores, for the bulk reduction's reads
    named_barrier(2 + wg, 128);
    if (reducer) {
      bulk_reduce_add(dq_accum + ((i64)(b * heads + h) * m_tiles + m0 / NI) * NI * HEAD_DIM + wg * DQ_CHUNK, sdq,
                      DQ_CHUNK * 4);
      bulk_commit();
    }
  }
  if (reducer) bulk_wait<0>();  // nothing in flight at exit
  cp_async_wait<0>();
  __syncthreads();  // no wgmma reads the tiles any more, and the q and dO stages are free

  // A warp stages its rows of dK, then of dV, in its own rows (of LDS) of the q and dO stages.
  T* stage = sq + wrow * LDS;
  scale_rows<1>(dk_acc, scale);
  store_rows<1>(dk_acc, stage, dk + b * dk_sb + hk * dk_sh, dk_sn, n0 + wrow, n_k, d);
  __syncwarp();
  store_rows<1>(dv_acc, stage, dv + b * dv_sb + hk * dv_sh, dv_sn, n0 + wrow, n_k, d);
}
#endif  // WGMMA

#if WGMMA
extern "C" __global__ void __launch_bounds__(THREADS, 1) attention_backward_dkdv_dq(DKDV_PARAMS) {
  extern __shared__ __align__(16) unsigned char smem[];
  dkdv_wgmma(smem, DKDV_ARGS);
}
#else
extern "C" __global__ void __launch_bounds__(THREADS) attention_backward_dkdv(DKDV_PARAMS) { DKDV_BODY(false); }
extern "C" __global__ void __launch_bounds__(THREADS) attention_backward_dkdv_dq(DKDV_PARAMS) { DKDV_BODY(true); }
#endif

#if WGMMA
// dq = dq_accum·scale rounded to T, from dkdv_wgmma's order: a thread takes one 16-float run of a tile's chunk,
// warpgroup w's accumulators 4κ .. 4κ+3 of threads τ = 32·ww + 4g + t, t = 0..3 (four 16-byte loads), i.e. rows
// 16·ww + g and + 8, columns w·DQ_N + 8κ .. + 7 of the tile (two 16-byte stores). dq_accum: float32 (B, Hq,
// ceil(Nq / 64), 64·HEAD_DIM); dq (B, Hq, Nq, d) at its strides. Grid: (ceil(ceil(Nq / 64)·4·HEAD_DIM / 256), B·Hq).
extern "C" __global__ void __launch_bounds__(256)
    attention_backward_dq_convert(const float* __restrict__ dq_accum, T* __restrict__ dq, i64 dq_sb, i64 dq_sh,
                                  i64 dq_sm, int heads, int n_q, int d, float scale) {
  constexpr int RUNS = NI * HEAD_DIM / 16;  // a tile's
  const int m_tiles = (n_q + NI - 1) / NI, i = blockIdx.x * 256 + threadIdx.x;
  if (i >= m_tiles * RUNS) return;
  const int run = i % RUNS, w = run / (DQ_CHUNK / 16), kappa = run / 32 % (DQ_N / 8), ww = run % 32 / 8, g = run % 8;
  const int row = i / RUNS * NI + ww * 16 + g, col = w * DQ_N + kappa * 8;
  const int bh = blockIdx.y, b = bh / heads, h = bh % heads;
  if (col >= d) return;
  const float4* src = reinterpret_cast<const float4*>(dq_accum + ((i64)bh * m_tiles * RUNS + i) * 16);
  float4 x[4];
#pragma unroll
  for (int t = 0; t < 4; ++t) x[t] = src[t];
  T* out = dq + b * dq_sb + h * dq_sh + col;
  if (row < n_q)
    *reinterpret_cast<uint4*>(out + row * dq_sm) =
        make_uint4(pack_pair(x[0].x * scale, x[0].y * scale, T{}), pack_pair(x[1].x * scale, x[1].y * scale, T{}),
                   pack_pair(x[2].x * scale, x[2].y * scale, T{}), pack_pair(x[3].x * scale, x[3].y * scale, T{}));
  if (row + 8 < n_q)
    *reinterpret_cast<uint4*>(out + (row + 8) * dq_sm) =
        make_uint4(pack_pair(x[0].z * scale, x[0].w * scale, T{}), pack_pair(x[1].z * scale, x[1].w * scale, T{}),
                   pack_pair(x[2].z * scale, x[2].w * scale, T{}), pack_pair(x[3].z * scale, x[3].w * scale, T{}));
}
#else
// dq = dq_accum·scale rounded to T, 8 columns a thread (two 16-byte loads, one 16-byte store). dq_accum: float32
// (B, Hq, Nq, d) contiguous; dq (B, Hq, Nq, d) at its strides, as q's. Grid: (ceil(Nq·d/8 / 256), B·Hq).
extern "C" __global__ void __launch_bounds__(256)
    attention_backward_dq_convert(const float* __restrict__ dq_accum, T* __restrict__ dq, i64 dq_sb, i64 dq_sh,
                                  i64 dq_sm, int heads, int n_q, int d, float scale) {
  const int chunks = d / 8, i = blockIdx.x * 256 + threadIdx.x;
  if (i >= n_q * chunks) return;
  const int bh = blockIdx.y, b = bh / heads, h = bh % heads, row = i / chunks, col = i % chunks * 8;
  const float4* src = reinterpret_cast<const float4*>(dq_accum + ((i64)bh * n_q + row) * d + col);
  const float4 x = src[0], y = src[1];
  *reinterpret_cast<uint4*>(dq + b * dq_sb + h * dq_sh + row * dq_sm + col) =
      make_uint4(pack_pair(x.x * scale, x.y * scale, T{}), pack_pair(x.z * scale, x.w * scale, T{}),
                 pack_pair(y.x * scale, y.y * scale, T{}), pack_pair(y.z * scale, y.w * scale, T{}));
}
#endif

#if !WGMMA
// Arguments as attention_backward_dkdv's, with dq (like q) for dk, dv and dq_accum. Grid: (ceil(Nq / BLOCK_OUTER),
// B·Hq); dynamic shared memory 2·(BLOCK_OUTER + STAGES·BLOCK_INNER)·LDS elements.
extern "C" __global__ void __launch_bounds__(THREADS)
    attention_backward_dq(const T* __restrict__ q, const T* __restrict__ k, const T* __restrict__ v,
                          const MASK_T* __restrict__ mask, const T* __restrict__ dout, const float* __restrict__ lse,
                          const float* __restrict__ delta, T* __restrict__ dq, i64 q_sb, i64 q_sh, i64 q_sm,
                          i64 k_sb, i64 k_sh, i64 k_sn, i64 v_sb, i64 v_sh, i64 v_sn, i64 do_sb, i64 do_sh,
                          i64 do_sm, i64 dq_sb, i64 dq_sh, i64 dq_sm, i64 mask_sb, i64 mask_sh, i64 mask_sm,
                          i64 mask_sn, int heads, int group, int n_q, int n_k, int d, float scale_log2,
                          float scale) {
  extern __shared__ __align__(16) unsigned char smem[];
  T* sq = reinterpret_cast<T*>(smem);  // [BLOCK_OUTER][LDS]: q, then dq on its way out
  T* sdo = sq + BLOCK_OUTER * LDS;     // [BLOCK_OUTER][LDS]
  T* sk = sdo + BLOCK_OUTER * LDS;     // [STAGES][NI][LDS]
  T* sv = sk + STAGES * NI * LDS;      // [STAGES][NI][LDS]
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int m0 = (gridDim.x - 1 - blockIdx.x) * BLOCK_OUTER;  // causal: the longest blocks first
  const int bh = blockIdx.y, b = bh / heads, h = bh % heads, hk = h / group;
  const int wrow = warp * MT * 16;
  const T* kb = k + b * k_sb + hk * k_sh;
  const T* vb = v + b * v_sb + hk * v_sh;
  const AttnMask am{mask + b * mask_sb + h * mask_sh, mask_sm, mask_sn};

  // Key tiles as in the forward: n_tiles hold every key a row sees, the first n_full need no mask.
  const int n_end = CAUSAL ? imin(n_k, imin(m0 + BLOCK_OUTER, n_q)) : n_k;
  const int n_tiles = (n_end + NI - 1) / NI;
  const int n_full = CAUSAL ? imin(n_k / NI, (m0 + 1) / NI) : n_k / NI;

  load_rows<BLOCK_OUTER>(sq, q + b * q_sb + h * q_sh, q_sm, m0, n_q, d);
  load_rows<BLOCK_OUTER>(sdo, dout + b * do_sb + h * do_sh, do_sm, m0, n_q, d);
#pragma unroll
  for (int st = 0; st < STAGES - 1; ++st) {
    if (st < n_tiles) {
      load_rows<NI>(sk + st * NI * LDS, kb, k_sn, st * NI, n_k, d);
      load_rows<NI>(sv + st * NI * LDS, vb, v_sn, st * NI, n_k, d);
    }
    cp_async_commit();
  }

  // This thread's rows m0 + wrow + 16i + g + 8r: their lse (log2 units) and delta.
  float row_lse[MT][2], row_delta[MT][2];
#pragma unroll
  for (int i = 0; i < MT; ++i)
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const int row = m0 + wrow + i * 16 + lane / 4 + 8 * r;
      const i64 at = (i64)bh * n_q + row;
      row_lse[i][r] = lse_log2(row < n_q ? lse[at] : 0.0f, row < n_q);
      row_delta[i][r] = row < n_q ? delta[at] : 0.0f;
    }

  float dq_acc[MT][ND][4];
  zero(dq_acc);
  for (int j = 0; j < n_tiles; ++j) {
    cp_async_wait<STAGES - 2>();
    __syncthreads();
    const int next = j + STAGES - 1;
    if (next < n_tiles) {
      load_rows<NI>(sk + next % STAGES * NI * LDS, kb, k_sn, next * NI, n_k, d);
      load_rows<NI>(sv + next % STAGES * NI * LDS, vb, v_sn, next * NI, n_k, d);
    }
    cp_async_commit();
    const T* tk = sk + j % STAGES * NI * LDS;
    const T* tv = sv + j % STAGES * NI * LDS;

    float p[MT][NT][4];  // S, then P: rows queries, columns keys
    scores_smem<MT, NI>(p, sq + wrow * LDS, tk);
    if (j < n_full) {
      mask_scores<false, false, MT, NI>(p, m0 + wrow, j * NI, n_q, n_k, scale_log2, am);
    } else {
      mask_scores<true, false, MT, NI>(p, m0 + wrow, j * NI, n_q, n_k, scale_log2, am);
    }
    float ds[MT][NT][4];  // dP, then dS
    scores_smem<MT, NI>(ds, sdo + wrow * LDS, tv);
#pragma unroll
    for (int i = 0; i < MT; ++i)
#pragma unroll
      for (int jn = 0; jn < NT; ++jn)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const float pe = ex2(p[i][jn][e] - row_lse[i][e / 2]);
          ds[i][jn][e] = pe * (ds[i][jn][e] - row_delta[i][e / 2]);
        }
    accumulate<MT, NI>(dq_acc, ds, tk);
  }
  cp_async_wait<0>();
  __syncthreads();

  // Each warp read only its own rows of sq: they are its stage now.
  scale_rows<MT>(dq_acc, scale);
  store_rows<MT>(dq_acc, sq + wrow * LDS, dq + b * dq_sb + h * dq_sh, dq_sm, m0 + wrow, n_q, d);
}
#endif  // !WGMMA
