// Attention backward, FlashAttention-2 on tensor cores (building blocks and layouts: ../_cuda/flash.cuh), in
// three kernels:
//   attention_backward_delta  delta = rowsum(dO∘O), float32 (B, Hq, Nq);
//   attention_backward_dkdv   one block per (BLOCK_OUTER keys, batch·kv head): loops over the query tiles
//                             (BLOCK_INNER rows) of every query head of its GQA group, so it owns its rows of
//                             dK and dV and sums the group for free;
//   attention_backward_dq     one block per (BLOCK_OUTER query rows, batch·head): loops over key tiles.
// Both recompute P from the forward's lse: P = 2^(S·scale·log2 e − lse·log2 e), and dS = P∘(dP − delta).
//
// dQ by its own pass rather than by atomics from the dK/dV pass: FLOPs 7 matrix products instead of 5
// (S and dP are recomputed: +40% tensor work), against the atomic pass's dS round trip through shared memory
// (dS is produced in the dK/dV pass's C layout, keys × queries, but dQ = dS·K needs it queries × keys), an
// fp32 dq_accum (B·Hq·Nq·D·4 bytes, zeroed, and a convert kernel) and red.add traffic of Nk/BLOCK_OUTER
// times that: at B=4, Hq=32, N=4096, D=128 that is 268 MB accumulated 32 times, 8.6 GB of L2 atomics
// against 2.7 TFLOP of products, i.e. 3 ms at 3 TB/s beside ~9 ms of math; the recomputation costs about
// as much (2/5 of 9 ms) and keeps every product's operands in registers, every gradient written once by
// one block, and the result deterministic (a tuner's verification sees the same bits every run).
//
// dK/dV pass, per query tile, in a warp's keys × queries C fragments (transposed products, so that Pᵀ and dSᵀ
// come out as the A operands of dV and dK without leaving registers):
//   Sᵀ = K·Qᵀ, Pᵀ, dV += Pᵀ·dO, dPᵀ = V·dOᵀ, dSᵀ = Pᵀ∘(dPᵀ − delta), dK += dSᵀ·Q;
// dQ pass, per key tile, in queries × keys fragments: S = Q·Kᵀ, P, dP = dO·Vᵀ, dS, dQ += dS·K.
// dK and dQ are scaled by the softmax scale once, at the end. Causal: the dK/dV pass starts at the query tile
// holding its first key, the dQ pass stops after its last row's key tile; only tiles that straddle the
// diagonal (and, in the dQ pass, the end of the keys) are masked. Query rows past Nq read lse as +inf
// (P = 0), so they add nothing to dK and dV; key rows past Nk of the dK/dV pass are computed but not stored.
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
#include "../_cuda/flash.cuh"

#define MT (BLOCK_OUTER / (16 * WARPS))  // m16 row tiles per warp
#define NI BLOCK_INNER
#define NT (NI / 8)

static_assert(MT >= 1 && MT * 16 * WARPS == BLOCK_OUTER, "BLOCK_OUTER must be 16·WARPS·MT");
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

// q and do (B, Hq, Nq, d), k and v (B, Hk, Nk, d), dk and dv like k: element (b, h, row, col) at b·sb + h·sh +
// row·sm (sn for keys) + col, strides in elements (multiples of 8, pointers 16-byte aligned). lse, delta:
// float32 (B, Hq, Nq), contiguous. Grid: (ceil(Nk / BLOCK_OUTER), B·Hk); dynamic shared memory
// 2·(BLOCK_OUTER + STAGES·BLOCK_INNER)·LDS elements + 2·STAGES·BLOCK_INNER floats.
extern "C" __global__ void __launch_bounds__(THREADS)
    attention_backward_dkdv(const T* __restrict__ q, const T* __restrict__ k, const T* __restrict__ v,
                            const MASK_T* __restrict__ mask, const T* __restrict__ dout,
                            const float* __restrict__ lse, const float* __restrict__ delta, T* __restrict__ dk,
                            T* __restrict__ dv, i64 q_sb, i64 q_sh, i64 q_sm, i64 k_sb, i64 k_sh, i64 k_sn,
                            i64 v_sb, i64 v_sh, i64 v_sn, i64 do_sb, i64 do_sh, i64 do_sm, i64 dk_sb, i64 dk_sh,
                            i64 dk_sn, i64 dv_sb, i64 dv_sh, i64 dv_sn, i64 mask_sb, i64 mask_sh, i64 mask_sm,
                            i64 mask_sn, int heads, int kv_heads, int group, int n_q, int n_k, int d,
                            float scale_log2, float scale) {
  extern __shared__ __align__(16) unsigned char smem[];
  T* sk = reinterpret_cast<T*>(smem);                    // [BLOCK_OUTER][LDS]: k, then dk on its way out
  T* sv = sk + BLOCK_OUTER * LDS;                        // [BLOCK_OUTER][LDS]: v, then dv
  T* sq = sv + BLOCK_OUTER * LDS;                        // [STAGES][NI][LDS]
  T* sdo = sq + STAGES * NI * LDS;                       // [STAGES][NI][LDS]
  float* s_lse = reinterpret_cast<float*>(sdo + STAGES * NI * LDS);  // [STAGES][NI]
  float* s_delta = s_lse + STAGES * NI;                  // [STAGES][NI]
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int n0 = blockIdx.x * BLOCK_OUTER;
  const int b = blockIdx.y / kv_heads, hk = blockIdx.y % kv_heads;
  const int wrow = warp * MT * 16;

  // Steps it = 0 .. total-1 walk the query tiles qt0 .. n_qt-1 of each head of the group in turn. Causal: the
  // tiles before the one holding query row n0 see none of these keys; a tile needs the causal mask while its
  // first row is before the block's last key.
  const int qt0 = CAUSAL ? n0 / NI : 0, n_qt = (n_q + NI - 1) / NI;
  const int per_head = n_qt > qt0 ? n_qt - qt0 : 0, total = group * per_head;
  auto load_step = [&](int it, int st) {
    const int h = hk * group + it / per_head, m0 = (qt0 + it % per_head) * NI;
    const i64 stats = (i64)(b * heads + h) * n_q;
    load_rows<NI>(sq + st * NI * LDS, q + b * q_sb + h * q_sh, q_sm, m0, n_q, d);
    load_rows<NI>(sdo + st * NI * LDS, dout + b * do_sb + h * do_sh, do_sm, m0, n_q, d);
    load_row_stats(s_lse + st * NI, s_delta + st * NI, lse + stats, delta + stats, m0, n_q);
  };

  // cp.async groups: k and v with step 0, then one group per step (empty ones too): when step it is used,
  // groups 0 .. it are complete.
  load_rows<BLOCK_OUTER>(sk, k + b * k_sb + hk * k_sh, k_sn, n0, n_k, d);
  load_rows<BLOCK_OUTER>(sv, v + b * v_sb + hk * v_sh, v_sn, n0, n_k, d);
#pragma unroll
  for (int st = 0; st < STAGES - 1; ++st) {
    if (st < total) load_step(st, st);
    cp_async_commit();
  }

  float dk_acc[MT][ND][4], dv_acc[MT][ND][4];
  zero(dk_acc);
  zero(dv_acc);
  for (int it = 0; it < total; ++it) {
    cp_async_wait<STAGES - 2>();  // step it landed (this thread's part); the barrier: everyone's, and the
    __syncthreads();              // stage read in step it-1 is free
    const int next = it + STAGES - 1;
    if (next < total) load_step(next, next % STAGES);
    cp_async_commit();

    const int st = it % STAGES, h = hk * group + it / per_head, m0 = (qt0 + it % per_head) * NI;
    const T* tq = sq + st * NI * LDS;
    const T* tdo = sdo + st * NI * LDS;
    const float* t_lse = s_lse + st * NI;
    const float* t_delta = s_delta + st * NI;
    const AttnMask am{mask + b * mask_sb + h * mask_sh, mask_sm, mask_sn};

    float p[MT][NT][4];  // Sᵀ, then Pᵀ: rows keys n0 + wrow + 16i + g + 8r, columns queries m0 + 8j + 2t + e%2
    scores_smem<MT, NI>(p, sk + wrow * LDS, tq);
    if (CAUSAL && m0 < n0 + BLOCK_OUTER - 1) {
      mask_scores<true, true, MT, NI>(p, n0 + wrow, m0, n_q, n_k, scale_log2, am);
    } else {
      mask_scores<false, true, MT, NI>(p, n0 + wrow, m0, n_q, n_k, scale_log2, am);
    }
#pragma unroll
    for (int j = 0; j < NT; ++j) {
      const int c = j * 8 + lane % 4 * 2;
      const float l0 = lse_log2(t_lse[c], m0 + c < n_q), l1 = lse_log2(t_lse[c + 1], m0 + c + 1 < n_q);
#pragma unroll
      for (int i = 0; i < MT; ++i) {
        p[i][j][0] = ex2(p[i][j][0] - l0);
        p[i][j][1] = ex2(p[i][j][1] - l1);
        p[i][j][2] = ex2(p[i][j][2] - l0);
        p[i][j][3] = ex2(p[i][j][3] - l1);
      }
    }
    accumulate<MT, NI>(dv_acc, p, tdo);

    float ds[MT][NT][4];  // dPᵀ, then dSᵀ
    scores_smem<MT, NI>(ds, sv + wrow * LDS, tdo);
#pragma unroll
    for (int j = 0; j < NT; ++j) {
      const int c = j * 8 + lane % 4 * 2;
      const float d0 = t_delta[c], d1 = t_delta[c + 1];
#pragma unroll
      for (int i = 0; i < MT; ++i) {
        ds[i][j][0] = p[i][j][0] * (ds[i][j][0] - d0);
        ds[i][j][1] = p[i][j][1] * (ds[i][j][1] - d1);
        ds[i][j][2] = p[i][j][2] * (ds[i][j][2] - d0);
        ds[i][j][3] = p[i][j][3] * (ds[i][j][3] - d1);
      }
    }
    accumulate<MT, NI>(dk_acc, ds, tq);
  }
  cp_async_wait<0>();
  __syncthreads();  // with no step at all, k and v may still be landing in rows other warps stage below

  // Each warp read only its own rows of sk and sv (as A operands): they are its stages now.
  scale_rows<MT>(dk_acc, scale);
  store_rows<MT>(dk_acc, sk + wrow * LDS, dk + b * dk_sb + hk * dk_sh, dk_sn, n0 + wrow, n_k, d);
  store_rows<MT>(dv_acc, sv + wrow * LDS, dv + b * dv_sb + hk * dv_sh, dv_sn, n0 + wrow, n_k, d);
}

// Arguments as attention_backward_dkdv's, with dq (like q) for dk and dv. Grid: (ceil(Nq / BLOCK_OUTER),
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
