// Attention forward, FlashAttention-2 on tensor cores (building blocks and layouts: ../_cuda/flash.cuh).
//
// One block per (BLOCK_M query rows, batch·head); WARPS warps of 16·MT rows each. The block's q tile is loaded
// once into shared memory and kept there or as A fragments in registers (Q_REGS); K and V tiles of BLOCK_N
// keys stream through a STAGES-deep ring of shared-memory stages filled by cp.async (tile j+STAGES-1 in
// flight while tile j is used). Per key tile:
//   S = Q·Kᵀ (mma.sync m16n8k16, float32), masked, in log2 units (scale·log2 e: applied in the exponent's
//   fma where SCALE_IN_EXP allows, else by mask_scores);
//   online softmax per row: m' = max(m, rowmax S) (moved only by more than RESCALE_SLACK), P = 2^(S − m'),
//   l = l·2^(m − m') + rowsum P, O·= 2^(m − m');
//   O += P·V with P rounded to T in registers as the A operand (no trip through shared memory).
// A row's max and sum live in the 4 lanes of its quad (C fragment columns 2t, 2t+1 of every n8 tile): the
// max is reduced over the quad every tile (the exponent needs it), the sum only at the end (each lane keeps
// its partial, rescaled by the same factor). Finally o = O / l, lse = (m + log2 l)·ln 2; a row that attends
// no key has l = 0: o = 0, lse = -inf.
//
// Causal (top-left aligned, key j seen by query i iff j ≤ i): key tiles past the block's last row are never
// loaded, and only tiles that straddle the diagonal or the end of the keys pay for masking. Blocks run
// last-query-block first, so the longest ones start first and the short ones fill in behind them.
// GQA: query head h reads key/value head h / group.
//
// WGMMA 1 (Hopper, compiled for sm_90a): the same algorithm with both products on warpgroup MMAs
// (../_cuda/wgmma.cuh): each warpgroup of 4 warps owns 64 query rows (BLOCK_M = 16·WARPS); S = Q·Kᵀ reads q and
// the K tile from shared memory by descriptor (m64 × BLOCK_N × k16 steps over the head dim), O += P·V takes P
// from registers and V by descriptor (m64 × HEAD_DIM × k16 steps over the keys). The tiles are stored
// 128-byte-swizzled instead of padded; HEAD_DIM 64 or 128.
//
// QK_F8 (kz_e4m3 or kz_e5m2): an FP8 call. The descales of the block's (batch, kv head) fold into the scale (q's
// and k's) and into the final normalisation (v's), and o is stored as O_T (T unless given). V arrives in T
// (float16, converted once by the host: exact for both 8-bit kinds), so P is rounded to float16 for P·V. With
// WGMMA at HEAD_DIM 128, q and k stay 8-bit floats and S = Q·Kᵀ runs on 8-bit wgmma (m64 × BLOCK_N × k32 steps): a
// row of q or k is 128 bytes, moved as a row of QK_DIM = 64 elements of T (the host passes 16-bit views of them),
// which fills one 128-byte swizzled line, as a 64-dim 16-bit row does. Otherwise the host converts q and k to
// float16 too (exactly), and the products are the 16-bit kernel's.
#ifndef BLOCK_M
#define BLOCK_M 128
#endif
#ifndef BLOCK_N
#define BLOCK_N 64
#endif
#ifndef WARPS
#define WARPS 8
#endif
#ifndef STAGES
#define STAGES 2
#endif
#ifndef WGMMA
#define WGMMA 0
#endif
// WGMMA only: who loads the K and V tiles. 0: every thread, by cp.async, a block barrier a tile; 1: a warp of
// their own (the block's last), by cp.async, stages handed over by mbarriers; 2: one thread of that warp, by the
// TMA unit (cp.async.bulk.tensor from the tensor maps the launch passes), the same mbarriers; 3: as 2 from a
// warpgroup of its own, which hands most of its registers to the consumers (setmaxnreg: 24 a thread for the
// producer, 240 for two consumer warpgroups, where 384 threads start with 168; 160 for three, where 512 start
// with 128).
#ifndef PRODUCER
#define PRODUCER 0
#endif
#define TMA (WGMMA && PRODUCER >= 2)
#define PRODUCER_WARPS (PRODUCER == 3 ? 4 : PRODUCER ? 1 : 0)
#define MOVE_REGISTERS (PRODUCER == 3 && (WARPS == 8 || WARPS == 12))
#define CONSUMER_REGISTERS (WARPS == 8 ? 240 : 160)  // 128·(24 + WARPS / 4 · CONSUMER_REGISTERS) ≤ 65536
// WGMMA with a PRODUCER only. OVERLAP 1: FlashAttention-3's order inside a warpgroup: tile j's S = Q·Kᵀ and
// tile j−1's O += P·V are issued together, and tile j's softmax runs while that P·V does (P of tile j−1 stays in
// registers; a stage is handed back after its P·V, one tile later).
#ifndef OVERLAP
#define OVERLAP 0
#endif
#include "../_cuda/flash.cuh"
#if WGMMA
#include "../_cuda/wgmma.cuh"
#endif
#ifdef QK_F8
#define DESCALED 1  // the descales are the kernel's arguments
#else
#define DESCALED 0
#endif
#if WGMMA && DESCALED && HEAD_DIM == 128
#define FP8 1  // Q·Kᵀ on 8-bit floats
#define QK_DIM (HEAD_DIM / 2)  // q and k rows in elements of T
#else
#define FP8 0
#define QK_DIM HEAD_DIM
#endif
#ifndef O_T
#define O_T T
#endif

#define MT (BLOCK_M / (16 * WARPS))  // m16 row tiles per warp
#define NT (BLOCK_N / 8)             // n8 key tiles per key tile

// Q_REGS: the q fragments stay in registers for the whole key loop. Without them (the choice that lets 32 rows
// per warp fit at head dim 128) each k16 step of S = Q·Kᵀ reads its fragments from the block's q tile.
#ifndef Q_REGS
#define Q_REGS 1
#endif

// Two blocks of 8 warps per SM (registers capped at 128) where the tile state is small (at most 80 words per
// thread: head dim 64 with BLOCK_N ≤ 64; 8 bytes of spill at 64 × 64): 16 warps hide the softmax's latency
// between the products better than 8. The state: o accumulators, scores, q fragments (all or one k16 step's).
#define STATE_WORDS (MT * (HEAD_DIM + BLOCK_N) / 2 + (Q_REGS ? MT * HEAD_DIM / 4 : 4 * MT))
#define MIN_BLOCKS (WARPS == 8 && STATE_WORDS <= 80 ? 2 : 1)

static_assert(MT >= 1 && MT * 16 * WARPS == BLOCK_M, "BLOCK_M must be 16·WARPS·MT");
static_assert(BLOCK_N % 16 == 0 && STAGES >= 2, "BLOCK_N must be a multiple of 16, STAGES at least 2");

// SCALE_IN_EXP: the softmax scale is positive and there is no additive mask, so the scores stay unscaled
// until the exponent: the row max of s·c is c·(row max of s), and each P = 2^(s·c − m') is one fma and one
// ex2 (FlashAttention-2's order), one multiply per score fewer. Otherwise mask_scores scales them first.
// The functions below take it as IN_EXP. FP8: the descales' sign is known only on the device, so the kernel
// chooses there, per block (attention_forward).
#if defined(SCALE_POSITIVE) && SCALE_POSITIVE && !MASK && !DESCALED
#define SCALE_IN_EXP 1
#else
#define SCALE_IN_EXP 0
#endif

// A row's running max moves only when a tile's max passes it by more than RESCALE_SLACK (log2 units), so P is
// at most 2^8 (no overflow in T or in the float32 sums) and after the first tiles the rows rarely move; acc is
// rescaled (16·MT·HEAD_DIM multiplies per warp) only when some row of the warp moved. The result is the same
// softmax: o = acc / l and lse = m + log2 l hold for any m that the sums were taken against.
#define RESCALE_SLACK 8.0f

// One key tile's scores s (masked; log2 units, or unscaled with IN_EXP: c = scale·log2 e) into the
// running row max m (log2 units) and partial sums l; s becomes P, and alpha the factor the output accumulators
// must take before this tile's P·V. Rows (i, r) are a thread's rows 16i + g + 8r. Returns whether some row of
// the warp moved (else every alpha is 1).
template <bool IN_EXP>
__device__ __forceinline__ bool softmax_tile(float (&s)[MT][NT][4], float (&m)[MT][2], float (&l)[MT][2],
                                             float (&alpha)[MT][2], float c) {
  bool moved = false;
#pragma unroll
  for (int i = 0; i < MT; ++i)
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      float mx = -KZ_INF;
#pragma unroll
      for (int j = 0; j < NT; ++j) mx = fmaxf(mx, fmaxf(s[i][j][2 * r], s[i][j][2 * r + 1]));
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
      if (IN_EXP) mx *= c;  // -inf stays -inf: c > 0
      const float m_new = mx > m[i][r] + RESCALE_SLACK ? mx : m[i][r];  // the first finite max always
      // A row that has seen no key yet (attn_mask) has m' = -inf: subtract 0 instead of -inf - -inf.
      const float base = m_new == -KZ_INF ? 0.0f : m_new;
      alpha[i][r] = m_new == m[i][r] ? 1.0f : ex2(m[i][r] - base);  // 0 from m = -inf: nothing to keep
      moved |= m_new != m[i][r];
      m[i][r] = m_new;
      float sum = 0.0f;
#pragma unroll
      for (int j = 0; j < NT; ++j)
#pragma unroll
        for (int e = 2 * r; e < 2 * r + 2; ++e) {
          s[i][j][e] = ex2(IN_EXP ? fmaf(s[i][j][e], c, -base) : s[i][j][e] - base);
          sum += s[i][j][e];
        }
      l[i][r] = l[i][r] * alpha[i][r] + sum;
    }
  return __any_sync(0xffffffffu, moved);
}

__device__ __forceinline__ void rescale(float (&acc)[MT][ND][4], const float (&alpha)[MT][2]) {
#pragma unroll
  for (int i = 0; i < MT; ++i)
#pragma unroll
    for (int jd = 0; jd < ND; ++jd)
#pragma unroll
      for (int e = 0; e < 4; ++e) acc[i][jd][e] *= alpha[i][e / 2];
}

// softmax_tile, then the accumulators rescaled where a row of the warp moved.
template <bool IN_EXP>
__device__ __forceinline__ void online_softmax(float (&s)[MT][NT][4], float (&m)[MT][2], float (&l)[MT][2],
                                               float (&acc)[MT][ND][4], float c) {
  float alpha[MT][2];
  if (softmax_tile<IN_EXP>(s, m, l, alpha, c)) rescale(acc, alpha);
}

// The block's place in the problem: query rows m0 .. m0 + BLOCK_M - 1 (the last blocks launch first, so the
// longest causal ones start first), its (batch, head)'s q and o rows, its key/value head's K and V rows (GQA),
// its attn_mask. Key tiles 0 .. n_tiles - 1 hold every key a row of the block sees (causal: keys ≤ its last
// row); the first n_full are seen whole by every row: they end at or before the block's first row (causal) and
// inside Nk.
struct BlockPlace {
  int m0, n_tiles, n_full;
  const T* q;
  const T* k;
  const T* v;
  O_T* o;
  AttnMask am;
#if TMA
  int b, hk;  // the (batch, key/value head) coordinates of K and V in their tensor maps
  const TensorMap* k_map;
  const TensorMap* v_map;
#endif
};

// Key tile j's scores of a warp's rows row0.. masked, and scaled unless IN_EXP (pre): the bounds and causal
// checks only past the tiles that every row of the block sees whole.
__device__ __forceinline__ void mask_tile(float (&s)[MT][NT][4], const BlockPlace& at, int j, int row0, int n_q,
                                          int n_k, float pre) {
  if (j < at.n_full) {
    mask_scores<false, false, MT, BLOCK_N>(s, row0, j * BLOCK_N, n_q, n_k, pre, at.am);
  } else {
    mask_scores<true, false, MT, BLOCK_N>(s, row0, j * BLOCK_N, n_q, n_k, pre, at.am);
  }
}

// o = post·acc / l and lse = (m + log2 l)·ln 2 for a warp's rows row0 + 16i + g + 8r of lse (rows ≥ n_q are
// not written); a row that attended no key has l = 0: o = 0, lse = -inf. post: v's descale (FP8), else 1.
__device__ __forceinline__ void finish_rows(float (&acc)[MT][ND][4], const float (&m)[MT][2], const float (&l)[MT][2],
                                            float* lse, int row0, int n_q, float post) {
  const int lane = threadIdx.x % 32;
#pragma unroll
  for (int i = 0; i < MT; ++i)
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      float sum = l[i][r];
      sum += __shfl_xor_sync(0xffffffffu, sum, 1);
      sum += __shfl_xor_sync(0xffffffffu, sum, 2);
      const float inv = sum == 0.0f ? 0.0f : post / sum;
#pragma unroll
      for (int jd = 0; jd < ND; ++jd) {
        acc[i][jd][2 * r] *= inv;
        acc[i][jd][2 * r + 1] *= inv;
      }
      const int row = row0 + i * 16 + lane / 4 + 8 * r;
      if (lane % 4 == 0 && row < n_q) lse[row] = sum == 0.0f ? -KZ_INF : (m[i][r] + log2f(sum)) * LN2;
    }
}

#if !WGMMA
// One block's rows (see BlockPlace) on mma.sync; rows of the matrices m (q, o), n (k, v) apart, lse this
// (batch, head)'s. Dynamic shared memory (BLOCK_M + 2·STAGES·BLOCK_N)·LDS elements.
template <bool IN_EXP>
__device__ __forceinline__ void forward_block(const BlockPlace& at, i64 q_sm, i64 k_sn, i64 v_sn, i64 o_sm,
                                              float* lse, int n_q, int n_k, int d, float scale_log2, float post) {
  extern __shared__ __align__(16) unsigned char smem[];
  T* sq = reinterpret_cast<T*>(smem);   // [BLOCK_M][LDS]: q, then o on its way out
  T* sk = sq + BLOCK_M * LDS;           // [STAGES][BLOCK_N][LDS]
  T* sv = sk + STAGES * BLOCK_N * LDS;  // [STAGES][BLOCK_N][LDS]
  const int warp = threadIdx.x / 32, m0 = at.m0, n_tiles = at.n_tiles;
  const int wrow = warp * MT * 16;  // the warp's first row in the block

  // cp.async groups: q with key tile 0, then one group per key tile (empty ones too, so that the count
  // waited for below is exact): when tile j is used, groups 0 .. j are complete.
  load_rows<BLOCK_M>(sq, at.q, q_sm, m0, n_q, d);
#pragma unroll
  for (int st = 0; st < STAGES - 1; ++st) {
    if (st < n_tiles) {
      load_rows<BLOCK_N>(sk + st * BLOCK_N * LDS, at.k, k_sn, st * BLOCK_N, n_k, d);
      load_rows<BLOCK_N>(sv + st * BLOCK_N * LDS, at.v, v_sn, st * BLOCK_N, n_k, d);
    }
    cp_async_commit();
  }
  cp_async_wait<STAGES - 2>();
  __syncthreads();
#if Q_REGS
  unsigned qf[MT][KD][4];
  a_fragments<MT>(qf, sq + wrow * LDS);
#endif

  float acc[MT][ND][4], m[MT][2], l[MT][2];
  zero(acc);
#pragma unroll
  for (int i = 0; i < MT; ++i)
#pragma unroll
    for (int r = 0; r < 2; ++r) m[i][r] = -KZ_INF, l[i][r] = 0.0f;

  const float pre = IN_EXP ? 1.0f : scale_log2;  // the factor mask_scores applies
  for (int j = 0; j < n_tiles; ++j) {
    // STAGES-1+j groups committed; all but the newest STAGES-2 complete => tile j has landed (this thread's
    // chunks); the barrier makes everyone's visible, and frees the stage that everyone read in step j-1.
    cp_async_wait<STAGES - 2>();
    __syncthreads();
    const int next = j + STAGES - 1;
    if (next < n_tiles) {
      load_rows<BLOCK_N>(sk + next % STAGES * BLOCK_N * LDS, at.k, k_sn, next * BLOCK_N, n_k, d);
      load_rows<BLOCK_N>(sv + next % STAGES * BLOCK_N * LDS, at.v, v_sn, next * BLOCK_N, n_k, d);
    }
    cp_async_commit();

    float s[MT][NT][4];
#if Q_REGS
    scores<MT, BLOCK_N>(s, qf, sk + j % STAGES * BLOCK_N * LDS);
#else
    scores_smem<MT, BLOCK_N>(s, sq + wrow * LDS, sk + j % STAGES * BLOCK_N * LDS);
#endif
    mask_tile(s, at, j, m0 + wrow, n_q, n_k, pre);
    online_softmax<IN_EXP>(s, m, l, acc, scale_log2);
    accumulate<MT, BLOCK_N>(acc, s, sv + j % STAGES * BLOCK_N * LDS);
  }
  cp_async_wait<0>();  // only empty groups can be left; nothing may be in flight at exit
  finish_rows(acc, m, l, lse, m0 + wrow, n_q, post);
  // The warp's rows of sq held its own q rows only, read into registers before the loop: its stage now.
  store_rows<MT, O_T>(acc, reinterpret_cast<O_T*>(sq) + wrow * LDS, at.o, o_sm, m0 + wrow, n_q, d);
}
#else  // WGMMA

static_assert(MT == 1, "a warpgroup's 4 warps own its 64 rows: BLOCK_M = 16·WARPS");
static_assert(HEAD_DIM % 64 == 0 && (BLOCK_N == 32 || BLOCK_N == 64 || BLOCK_N == 128),
              "the wgmma path takes HEAD_DIM 64 or 128 and BLOCK_N 32, 64 or 128");
static_assert(QK_DIM % 64 == 0, "FP8 q and k rows fill whole 128-byte lines: HEAD_DIM 128");
#define CB (HEAD_DIM / 64)     // 64-column blocks of a swizzled V tile
#define QK_CB (QK_DIM / 64)    // and of a q or K tile

// Tile shapes in 16-byte units (what a descriptor's start address counts): a stage of K and of V, and a
// 64-column block of the q tile and of a K tile.
#define K_STAGE_UNITS (BLOCK_N * QK_DIM * 2 / 16)
#define V_STAGE_UNITS (BLOCK_N * HEAD_DIM * 2 / 16)
#define Q_BLOCK_UNITS (BLOCK_M * 128 / 16)
#define K_BLOCK_UNITS (BLOCK_N * 128 / 16)

// Issue S = Q·Kᵀ of the K tile in `stage` (in 16-byte units) as one wgmma group.
__device__ __forceinline__ void issue_scores(float (&s_flat)[NT * 4], u64 q_desc, u64 k_desc, int stage) {
  wgmma_fence();
#if FP8
  // k32 steps of 8-bit elements, 32 bytes along the lines each (as a k16 step of 16-bit ones)
#pragma unroll
  for (int kk = 0; kk < QK_DIM / 16; ++kk) {
    const int step = kk / 4 * Q_BLOCK_UNITS + kk % 4 * 2;
    wgmma_ss_f8(s_flat, q_desc + step, k_desc + stage + kk / 4 * K_BLOCK_UNITS + kk % 4 * 2, kk > 0, QK_F8{},
                QK_F8{});
  }
#else
  wgmma_over_head_dim(s_flat, q_desc, Q_BLOCK_UNITS, k_desc + stage, K_BLOCK_UNITS);
#endif
  wgmma_commit();
}

// Issue O += P·V of the V tile in `stage` as one wgmma group (keys 16c .. 16c+15 are lines 16c.. of it).
__device__ __forceinline__ void issue_values(float (&acc_flat)[ND * 4], const unsigned (&p)[1][BLOCK_N / 16][4],
                                             u64 v_desc, int stage) {
  wgmma_fence();
  wgmma_over_rows(acc_flat, p, v_desc + stage);
  wgmma_commit();
}

// One block's rows (see BlockPlace) on warpgroup MMAs; arguments as the mma.sync forward_block's. Dynamic shared
// memory: 1024 bytes of alignment slack, then the q tile and STAGES × (K, V) tiles, each 1024-byte aligned.
//
// PRODUCER 1: one more warp (the last) loads every K and V tile; a stage's full mbarrier completes when the
// producer's 32 lanes' copies of it have landed, its empty mbarrier when every consumer thread is done with it,
// and the producer waits on that before refilling it. Each warpgroup loads its own q rows. So no barrier of the
// whole block inside the key loop: a warpgroup waits only for its data, and the warpgroups may drift apart by up
// to STAGES - 1 tiles (with the per-tile __syncthreads of PRODUCER 0 they start every tile together, so their
// products and softmaxes meet the tensor cores at the same time). 2·STAGES mbarriers follow the V tiles.
template <bool IN_EXP>
__device__ __forceinline__ void forward_block(const BlockPlace& at, i64 q_sm, i64 k_sn, i64 v_sn, i64 o_sm,
                                              float* lse, int n_q, int n_k, int d, float scale_log2, float post) {
  extern __shared__ __align__(16) unsigned char smem_raw[];
  T* sq = reinterpret_cast<T*>(smem_raw + (1024 - smem_addr(smem_raw) % 1024) % 1024);  // [QK_CB][BLOCK_M][64]
  T* sk = sq + BLOCK_M * QK_DIM;             // [STAGES][QK_CB][BLOCK_N][64]
  T* sv = sk + STAGES * BLOCK_N * QK_DIM;    // [STAGES][CB][BLOCK_N][64]
  const int warp = threadIdx.x / 32, wg = warp / 4, m0 = at.m0, n_tiles = at.n_tiles;
  const int wrow = warp * 16;  // the warp's first row in the block
  const int dqk = FP8 ? d / 2 : d;  // the columns of q and k, in elements of T

#if PRODUCER
  u64* full = reinterpret_cast<u64*>(sv + STAGES * BLOCK_N * HEAD_DIM);  // [STAGES]
  u64* empty = full + STAGES;                                             // [STAGES]
  if (threadIdx.x == 0) {
#pragma unroll
    for (int st = 0; st < STAGES; ++st) mbar_init(&full[st], TMA ? 1 : 32), mbar_init(&empty[st], THREADS);
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
  }
  __syncthreads();
#if TMA
  if (warp >= WARPS) {  // the producer: its first lane issues a tile's QK_CB + CB boxes of 64 columns × BLOCK_N keys
#if MOVE_REGISTERS
    setmaxnreg_dec<24>();
#endif
    if (warp == WARPS && threadIdx.x % 32 == 0) {
      for (int t = 0; t < n_tiles; ++t) {
        const int slot = t % STAGES;
        if (t >= STAGES) mbar_wait(&empty[slot], (t / STAGES - 1) & 1);
        // whole boxes, zeros too
        mbar_arrive_expect(&full[slot], BLOCK_N * (QK_DIM + HEAD_DIM) * (unsigned)sizeof(T));
#pragma unroll
        for (int c = 0; c < CB; ++c) {  // (QK_CB ≤ CB)
          if (c < QK_CB)
            tma_load_4d(sk + (slot * QK_CB + c) * BLOCK_N * 64, at.k_map, c * 64, t * BLOCK_N, at.hk, at.b, &full[slot]);
          tma_load_4d(sv + (slot * CB + c) * BLOCK_N * 64, at.v_map, c * 64, t * BLOCK_N, at.hk, at.b, &full[slot]);
        }
      }
    }
    return;
  }
#else
  if (warp == WARPS) {  // the producer
    const int lane = threadIdx.x % 32;
    for (int t = 0; t < n_tiles; ++t) {
      const int slot = t % STAGES;
      if (t >= STAGES) mbar_wait(&empty[slot], (t / STAGES - 1) & 1);  // the consumers are done with tile t - STAGES
      load_rows_sw<BLOCK_N, BLOCK_N, 32, QK_DIM / 8>(sk + slot * BLOCK_N * QK_DIM, at.k, k_sn, t * BLOCK_N, n_k, dqk,
                                                     lane);
      load_rows_sw<BLOCK_N, BLOCK_N, 32>(sv + slot * BLOCK_N * HEAD_DIM, at.v, v_sn, t * BLOCK_N, n_k, d, lane);
      mbar_arrive_on_copies(&full[slot]);
    }
    cp_async_wait<0>();
    return;
  }
#endif
#if MOVE_REGISTERS
  setmaxnreg_inc<CONSUMER_REGISTERS>();
#endif
  // this warpgroup's 64 q rows (rows wg·64.. of every column block)
  load_rows_sw<64, BLOCK_M, 128, QK_DIM / 8>(sq + wg * 64 * 64, at.q, q_sm, m0 + wg * 64, n_q, dqk,
                                             threadIdx.x % 128);
  cp_async_commit();
  cp_async_wait<0>();
  fence_proxy_async();
  named_barrier(2 + wg, 128);
#else
  load_rows_sw<BLOCK_M, BLOCK_M, THREADS, QK_DIM / 8>(sq, at.q, q_sm, m0, n_q, dqk, threadIdx.x);
#pragma unroll
  for (int st = 0; st < STAGES - 1; ++st) {
    if (st < n_tiles) {
      load_rows_sw<BLOCK_N, BLOCK_N, THREADS, QK_DIM / 8>(sk + st * BLOCK_N * QK_DIM, at.k, k_sn, st * BLOCK_N, n_k,
                                                          dqk, threadIdx.x);
      load_rows_sw<BLOCK_N, BLOCK_N, THREADS>(sv + st * BLOCK_N * HEAD_DIM, at.v, v_sn, st * BLOCK_N, n_k, d, threadIdx.x);
    }
    cp_async_commit();
  }
#endif

  // Descriptors: the warpgroup's 64 q rows (K-major A), a stage's K tile (K-major B) and V tile (MN-major B,
  // its 64-column blocks BLOCK_N lines apart). Steps and stages move only the start address (bits 0-13, in
  // 16-byte units; shared addresses stay below 2^18, so adding to it never carries into the offsets).
  const u64 q_desc = sw128_desc(sq + wg * 64 * 64, 16);
  const u64 k_desc = sw128_desc(sk, 16);
  const u64 v_desc = sw128_desc(sv, BLOCK_N * 128);

  float acc[1][ND][4], m[1][2], l[1][2];
  zero(acc);
  m[0][0] = m[0][1] = -KZ_INF;
  l[0][0] = l[0][1] = 0.0f;
  float (&acc_flat)[ND * 4] = reinterpret_cast<float (&)[ND * 4]>(acc);

  const float pre = IN_EXP ? 1.0f : scale_log2;
#if OVERLAP
  static_assert(PRODUCER, "OVERLAP hands stages back by the producer's mbarriers");
  // Tile 0's S and softmax, then iteration j issues tile j's S and tile j−1's P·V and runs tile j's softmax,
  // then tile n−1's P·V: every wgmma group of the loop is committed unconditionally, so that ptxas sees that
  // wait<1> leaves only the P·V in flight (it serializes the products where it cannot). p holds P of the tile
  // before, alpha the factor acc takes before its P·V.
  unsigned p[1][BLOCK_N / 16][4];
  float alpha[1][2];
  bool moved = false;
  float s[1][NT][4];
  float (&s_flat)[NT * 4] = reinterpret_cast<float (&)[NT * 4]>(s);
  auto wait_tile = [&](int j) {
    mbar_wait(&full[j % STAGES], j / STAGES & 1);
    if (!TMA) fence_proxy_async();  // the producer's cp.async chunks (generic proxy), for the wgmma reads
  };
  auto scores = [&](int j) { issue_scores(s_flat, q_desc, k_desc, j % STAGES * K_STAGE_UNITS); };
  auto values = [&](int j) {  // acc rescaled first
    if (moved) rescale(acc, alpha);
    issue_values(acc_flat, p, v_desc, j % STAGES * V_STAGE_UNITS);
  };
  auto softmax = [&](int j) {  // tile j's S (landed), masked, into P in place
    fence_operands(s_flat);
    mask_tile(s, at, j, m0 + wrow, n_q, n_k, pre);
    moved = softmax_tile<IN_EXP>(s, m, l, alpha, scale_log2);
  };
  if (n_tiles > 0) {
    wait_tile(0);
    scores(0);
    wgmma_wait<0>();
    softmax(0);
    pack_p<1, BLOCK_N>(p, s);
    for (int j = 1; j < n_tiles; ++j) {
      wait_tile(j);
      scores(j);
      values(j - 1);
      wgmma_wait<1>();
      softmax(j);
      wgmma_wait<0>();
      fence_operands(acc_flat);
      fence_operands(p);  // read by the P·V until the wait
      mbar_arrive(&empty[(j - 1) % STAGES]);
      pack_p<1, BLOCK_N>(p, s);
    }
    values(n_tiles - 1);
    wgmma_wait<0>();
    fence_operands(acc_flat);
    mbar_arrive(&empty[(n_tiles - 1) % STAGES]);
  }
#else
  for (int j = 0; j < n_tiles; ++j) {
#if PRODUCER
    mbar_wait(&full[j % STAGES], j / STAGES & 1);
    if (!TMA) fence_proxy_async();  // the producer's cp.async chunks (generic proxy), for the wgmma reads
#else
    cp_async_wait<STAGES - 2>();
    fence_proxy_async();  // this thread's landed chunks, for the wgmma reads after the barrier
    __syncthreads();
    const int next = j + STAGES - 1;
    if (next < n_tiles) {
      load_rows_sw<BLOCK_N, BLOCK_N, THREADS, QK_DIM / 8>(sk + next % STAGES * BLOCK_N * QK_DIM, at.k, k_sn,
                                                          next * BLOCK_N, n_k, dqk, threadIdx.x);
      load_rows_sw<BLOCK_N, BLOCK_N, THREADS>(sv + next % STAGES * BLOCK_N * HEAD_DIM, at.v, v_sn, next * BLOCK_N, n_k, d,
                                              threadIdx.x);
    }
    cp_async_commit();
#endif

    float s[1][NT][4];
    float (&s_flat)[NT * 4] = reinterpret_cast<float (&)[NT * 4]>(s);
    issue_scores(s_flat, q_desc, k_desc, j % STAGES * K_STAGE_UNITS);
    wgmma_wait<0>();
    fence_operands(s_flat);

    mask_tile(s, at, j, m0 + wrow, n_q, n_k, pre);
    online_softmax<IN_EXP>(s, m, l, acc, scale_log2);
    unsigned p[1][BLOCK_N / 16][4];
    pack_p<1, BLOCK_N>(p, s);
    issue_values(acc_flat, p, v_desc, j % STAGES * V_STAGE_UNITS);
    wgmma_wait<0>();
    fence_operands(acc_flat);
#if PRODUCER
    mbar_arrive(&empty[j % STAGES]);
#endif
  }
#endif  // OVERLAP
#if !PRODUCER
  cp_async_wait<0>();  // the ring's last (empty) groups; with a producer the consumers' one group, q, has landed
#endif
  finish_rows(acc, m, l, lse, m0 + wrow, n_q, post);
  // Every warpgroup's reads of q and the K/V ring are done past this barrier: o is staged from sq on, in rows
  // of LDS (BLOCK_M·LDS elements: more than the q tile, less than q and one stage of K and V).
#if PRODUCER
  named_barrier(1, THREADS);  // the consumers (the producer may have left)
#else
  __syncthreads();
#endif
  store_rows<1, O_T>(acc, reinterpret_cast<O_T*>(sq) + wrow * LDS, at.o, o_sm, m0 + wrow, n_q, d);
}
#endif  // WGMMA

#if WGMMA
#define KERNEL_THREADS (THREADS + 32 * PRODUCER_WARPS)
#define KERNEL_MIN_BLOCKS 1
#else
#define KERNEL_THREADS THREADS
#define KERNEL_MIN_BLOCKS MIN_BLOCKS
#endif

// q (B, Hq, Nq, d), k and v (B, Hk, Nk, d), o like q: element (b, h, row, col) at b·sb + h·sh + row·sm + col
// (strides in elements, each a multiple of 8, pointers 16-byte aligned: the wrapper sees to it). lse: float32
// (B, Hq, Nq) contiguous. mask: attn_mask(b, h, query, key) at its four strides (MASK only). scale_log2: the
// softmax scale times log2 e. FP8 calls (DESCALED): v float16, q and k float16 too, or with WGMMA 16-bit views of
// the 8-bit rows (d/2 elements a row, strides in those units), and the descales float32 (batch, kv head) at their
// strides (0 for one element).
// Grid: (ceil(Nq / BLOCK_M), B·Hq).
extern "C" __global__ void __launch_bounds__(KERNEL_THREADS, KERNEL_MIN_BLOCKS)
    attention_forward(const T* __restrict__ q, const T* __restrict__ k, const T* __restrict__ v,
                      const MASK_T* __restrict__ mask, O_T* __restrict__ o, float* __restrict__ lse, i64 q_sb,
                      i64 q_sh, i64 q_sm, i64 k_sb, i64 k_sh, i64 k_sn, i64 v_sb, i64 v_sh, i64 v_sn, i64 o_sb,
                      i64 o_sh, i64 o_sm, i64 mask_sb, i64 mask_sh, i64 mask_sm, i64 mask_sn, int heads,
                      int group, int n_q, int n_k, int d, float scale_log2
#if DESCALED
                      , const float* __restrict__ q_descale, const float* __restrict__ k_descale,
                      const float* __restrict__ v_descale, i64 qd_sb, i64 qd_sh, i64 kd_sb, i64 kd_sh, i64 vd_sb,
                      i64 vd_sh
#endif
#if TMA
                      , const __grid_constant__ TensorMap k_map, const __grid_constant__ TensorMap v_map
#endif
                      ) {
  const int m0 = (gridDim.x - 1 - blockIdx.x) * BLOCK_M;
  const int bh = blockIdx.y, b = bh / heads, h = bh % heads, hk = h / group;
  const int n_end = CAUSAL ? imin(n_k, imin(m0 + BLOCK_M, n_q)) : n_k;
  const BlockPlace at{m0, (n_end + BLOCK_N - 1) / BLOCK_N,
                      CAUSAL ? imin(n_k / BLOCK_N, (m0 + 1) / BLOCK_N) : n_k / BLOCK_N,
                      q + b * q_sb + h * q_sh, k + b * k_sb + hk * k_sh, v + b * v_sb + hk * v_sh,
                      o + b * o_sb + h * o_sh, {mask + b * mask_sb + h * mask_sh, mask_sm, mask_sn}
#if TMA
                      , b, hk, &k_map, &v_map
#endif
                      };
#if DESCALED
  // the descales of (b, hk): q's and k's scale the scores, v's the output. The scale goes into the exponent
  // where it came out positive and no additive mask applies (MASK: one instantiation, the general path).
  scale_log2 *= q_descale[b * qd_sb + hk * qd_sh] * k_descale[b * kd_sb + hk * kd_sh];
  const float post = v_descale[b * vd_sb + hk * vd_sh];
  if (!MASK && scale_log2 > 0.0f) {
    forward_block<!MASK>(at, q_sm, k_sn, v_sn, o_sm, lse + (i64)bh * n_q, n_q, n_k, d, scale_log2, post);
  } else {
    forward_block<false>(at, q_sm, k_sn, v_sn, o_sm, lse + (i64)bh * n_q, n_q, n_k, d, scale_log2, post);
  }
#else
  forward_block<SCALE_IN_EXP>(at, q_sm, k_sn, v_sn, o_sm, lse + (i64)bh * n_q, n_q, n_k, d, scale_log2, 1.0f);
#endif
}
