// Building blocks of the FlashAttention-2 kernels on tensor cores (plugins/attention/cuda.cu, the forward;
// plugins/attention_backward/cuda.cu, the backward), for T = kz_half or kz_bf16 and a compile-time HEAD_DIM
// (a multiple of 16; the call's head dim d, a multiple of 8, may be smaller: columns d.. are zero-filled on
// load and never stored).
//
// Every matrix tile in shared memory is row-major, [rows][LDS] with LDS = HEAD_DIM + 8: rows of a
// (queries or keys) × head-dim matrix, filled by 16-byte cp.async chunks. Padding, not an XOR swizzle: a row
// is HEAD_DIM/8 + 1 chunks of 16 bytes, an odd number when HEAD_DIM is a multiple of 16, so the 8 rows
// that one 8-lane phase of an ldmatrix reads (8 × 16 contiguous bytes, same column) start in 8 different
// 16-byte bank groups: conflict-free for every HEAD_DIM and for ldmatrix with and without .trans, at the
// cost of 8 elements a row (6% of shared memory at HEAD_DIM 128), and no address arithmetic beyond a
// multiply. The epilogue's C-fragment stores (4 bytes at row g, column 2t) are conflict-free too: the row
// stride, LDS/2 = 4·odd words, puts rows g = 0..7 on 8 distinct groups of 4 banks, and t picks the bank.
//
// A warp owns MT m16 row tiles (16·MT rows) of its block's outer dimension and all columns of the inner
// one. The products (fragment layouts in tensor_core.cuh):
//   scores*:    S (16·MT × NI) = A · Bᵀ over the head dim, A rows from registers (a_fragments) or from
//               shared memory, B rows from a shared tile [NI][LDS] read by ldmatrix (no .trans: B(k, n) =
//               tile[n][k] is k-contiguous, as mma wants).
//   accumulate: ACC (16·MT × HEAD_DIM) += P · B with P the float32 C fragments of a scores* product, turned
//               into A fragments in registers (the m16n8k16 C layout of n8 tiles 2c, 2c+1 is the A layout
//               of k16 step c, see accumulate), and B = a shared tile [NI][LDS] read by ldmatrix.trans.
#include "tensor_core.cuh"

#ifndef HEAD_DIM
#define HEAD_DIM 128
#endif
#ifndef CAUSAL
#define CAUSAL 0
#endif
#ifndef MASK
#define MASK 0  // an attn_mask is applied
#endif
#ifndef MASK_T
#define MASK_T float  // its element type: unsigned char (bool), float, kz_half or kz_bf16
#endif
#ifndef MASK_BOOL
#define MASK_BOOL 0
#endif

#define THREADS (32 * WARPS)
#define LDS (HEAD_DIM + 8)         // shared row stride, elements
#define CPR (HEAD_DIM / 8)         // 16-byte chunks per row
#define KD (HEAD_DIM / 16)         // k16 steps over the head dim
#define ND (HEAD_DIM / 8)          // n8 tiles over the head dim
#define LOG2E 1.4426950408889634f  // scores are kept in log2 units, so exp is ex2
#define LN2 0.6931471805599453f

static_assert(HEAD_DIM % 16 == 0 && HEAD_DIM >= 16, "HEAD_DIM must be a multiple of 16");

typedef long long i64;

__device__ __forceinline__ int imin(int a, int b) { return a < b ? a : b; }

// Rows row0 .. row0+ROWS-1 of a matrix (row r at g + r·stride, d contiguous elements) into the shared tile
// s [ROWS][LDS] by 16-byte cp.async chunks (the caller commits); rows ≥ n_rows and columns ≥ d are zeros,
// and nothing outside the matrix is read (a zero-fill copies 0 source bytes: its address may lie past the
// matrix, or, in the generic path, is g itself).
template <int ROWS>
__device__ __forceinline__ void load_rows(T* s, const T* g, i64 stride, int row0, int n_rows, int d) {
  constexpr int CHUNKS = ROWS * CPR;
  if constexpr (THREADS % CPR == 0) {
    // Each pass of the block covers STEP whole rows: a thread's chunks share one column and sit STEP rows
    // apart, so one address stepped by STEP rows serves them all (no per-chunk offsets held in registers).
    constexpr int STEP = THREADS / CPR;
    const int r = threadIdx.x / CPR, col = threadIdx.x % CPR * 8;
    const int rows = col < d ? n_rows - row0 - r : 0;  // this thread's rows that exist, from row0 + r on
    const i64 step = STEP * stride;
    const T* src = g + (row0 + r) * stride + col;
#pragma unroll
    for (int i = 0; i < (ROWS + STEP - 1) / STEP; ++i, src += step) {
      // src may point past the matrix where the row does not exist: a zero-fill copy reads nothing
      if (ROWS % STEP == 0 || r + i * STEP < ROWS) cp_async16(s + (r + i * STEP) * LDS + col, src, i * STEP < rows ? 16 : 0);
    }
  } else {
#pragma unroll
    for (int i = 0; i < (CHUNKS + THREADS - 1) / THREADS; ++i) {
      const int c = threadIdx.x + i * THREADS;
      if (CHUNKS % THREADS == 0 || c < CHUNKS) {
        const int r = c / CPR, col = c % CPR * 8;
        const bool ok = row0 + r < n_rows && col < d;
        cp_async16(s + r * LDS + col, ok ? g + (row0 + r) * stride + col : g, ok ? 16 : 0);
      }
    }
  }
}

// A fragments of MT m16 row tiles × the head dim, rows 0.. of the shared tile s. Lane l points at row
// 16i + l%16, column 16kk + 8·(l/16): matrices (rows 0-7, cols 0-7), (8-15, 0-7), (0-7, 8-15), (8-15, 8-15)
// come from lanes 0-7, 8-15, 16-23, 24-31 and are a0, a1, a2, a3 of the mma.
template <int MT>
__device__ __forceinline__ void a_fragments(unsigned (&a)[MT][KD][4], const T* s) {
  const int lane = threadIdx.x % 32;
#pragma unroll
  for (int i = 0; i < MT; ++i)
#pragma unroll
    for (int kk = 0; kk < KD; ++kk) ldmatrix_x4(a[i][kk], s + (i * 16 + lane % 16) * LDS + kk * 16 + lane / 16 * 8);
}

// s (+)= A·Bᵀ for k16 step kk: A fragments a (MT tiles), B rows 0..NI-1 of the shared tile sb. For n8 tiles
// j, j+1 (B rows 8j .. 8j+15), lane l points at row 8j + 8·(l/16) + l%8, column 16kk + 8·((l/8)%2): the
// matrices (rows 8j.., k 0-7), (8j.., k 8-15), (8j+8.., k 0-7), (8j+8.., k 8-15) are b0, b1 of tile j and
// b0, b1 of tile j+1 (without .trans lane l gets row g = n, columns 2t, 2t+1 = k: B's layout).
template <int MT, int NI>
__device__ __forceinline__ void scores_step(float (&s)[MT][NI / 8][4], const unsigned (&a)[MT][4], const T* sb,
                                            int kk) {
  const int lane = threadIdx.x % 32;
#pragma unroll
  for (int j = 0; j < NI / 8; j += 2) {
    unsigned b[4];
    ldmatrix_x4(b, sb + (j * 8 + lane / 16 * 8 + lane % 8) * LDS + kk * 16 + lane / 8 % 2 * 8);
#pragma unroll
    for (int i = 0; i < MT; ++i) {
      mma_16816(s[i][j], a[i], b, T{});
      mma_16816(s[i][j + 1], a[i], b + 2, T{});
    }
  }
}

template <int MT, int NI>
__device__ __forceinline__ void zero(float (&s)[MT][NI][4]) {
#pragma unroll
  for (int i = 0; i < MT; ++i)
#pragma unroll
    for (int j = 0; j < NI; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) s[i][j][e] = 0.0f;
}

// s = A·Bᵀ, A from registers (a_fragments), B the shared tile sb [NI][LDS].
template <int MT, int NI>
__device__ __forceinline__ void scores(float (&s)[MT][NI / 8][4], const unsigned (&a)[MT][KD][4], const T* sb) {
  zero(s);
#pragma unroll
  for (int kk = 0; kk < KD; ++kk) {
    unsigned ak[MT][4];
#pragma unroll
    for (int i = 0; i < MT; ++i)
#pragma unroll
      for (int e = 0; e < 4; ++e) ak[i][e] = a[i][kk][e];
    scores_step<MT, NI>(s, ak, sb, kk);
  }
}

// s = A·Bᵀ, A rows 0.. of the shared tile sa (a warp's own rows), one k16 step of fragments at a time.
template <int MT, int NI>
__device__ __forceinline__ void scores_smem(float (&s)[MT][NI / 8][4], const T* sa, const T* sb) {
  const int lane = threadIdx.x % 32;
  zero(s);
#pragma unroll
  for (int kk = 0; kk < KD; ++kk) {
    unsigned a[MT][4];
#pragma unroll
    for (int i = 0; i < MT; ++i) ldmatrix_x4(a[i], sa + (i * 16 + lane % 16) * LDS + kk * 16 + lane / 16 * 8);
    scores_step<MT, NI>(s, a, sb, kk);
  }
}

// acc += P·B: P (16·MT × NI) in C fragments, B the shared tile sb [NI][LDS] (k = its rows, n = head dim).
// A fragment of k16 step c: a0 = (row g, k 2t, 2t+1) is c0, c1 of n8 tile 2c; a1 (row g+8) its c2, c3;
// a2, a3 (k 2t+8, 2t+9) the same of tile 2c+1. B for head-dim n8 tiles jd, jd+1: lane l points at row
// 16c + l%16, column 8jd + 8·(l/16); .trans gives lane l column g (= n), rows 2t, 2t+1 (= k) of each
// matrix: (k 0-7, n 0-7), (k 8-15, n 0-7), (k 0-7, n 8-15), (k 8-15, n 8-15) are b0, b1 of jd and of jd+1.
template <int MT, int NI>
__device__ __forceinline__ void pack_p(unsigned (&a)[MT][NI / 16][4], const float (&p)[MT][NI / 8][4]) {
#pragma unroll
  for (int c = 0; c < NI / 16; ++c)
#pragma unroll
    for (int i = 0; i < MT; ++i) {
      a[i][c][0] = pack_pair(p[i][2 * c][0], p[i][2 * c][1], T{});
      a[i][c][1] = pack_pair(p[i][2 * c][2], p[i][2 * c][3], T{});
      a[i][c][2] = pack_pair(p[i][2 * c + 1][0], p[i][2 * c + 1][1], T{});
      a[i][c][3] = pack_pair(p[i][2 * c + 1][2], p[i][2 * c + 1][3], T{});
    }
}

// acc += P·B with P already packed by pack_p (half the registers of its float32 C fragments).
template <int MT, int NI>
__device__ __forceinline__ void accumulate_packed(float (&acc)[MT][ND][4], const unsigned (&a)[MT][NI / 16][4],
                                                  const T* sb) {
  const int lane = threadIdx.x % 32;
#pragma unroll
  for (int c = 0; c < NI / 16; ++c)
#pragma unroll
    for (int jd = 0; jd < ND; jd += 2) {
      unsigned b[4];
      ldmatrix_x4_trans(b, sb + (c * 16 + lane % 16) * LDS + jd * 8 + lane / 16 * 8);
#pragma unroll
      for (int i = 0; i < MT; ++i) {
        mma_16816(acc[i][jd], a[i][c], b, T{});
        mma_16816(acc[i][jd + 1], a[i][c], b + 2, T{});
      }
    }
}

template <int MT, int NI>
__device__ __forceinline__ void accumulate(float (&acc)[MT][ND][4], const float (&p)[MT][NI / 8][4], const T* sb) {
  unsigned a[MT][NI / 16][4];
  pack_p<MT, NI>(a, p);
  accumulate_packed<MT, NI>(acc, a, sb);
}

// The attn_mask of one (batch, head): element (query, key) at p[query·sq + key·sk] (broadcast dimensions
// have stride 0). Without MASK it is never read.
struct AttnMask {
  const MASK_T* p;
  i64 sq, sk;
  // x (a score in log2 units) with the mask applied; outside [0, n_q) × [0, n_k) nothing is read (the
  // caller drops those scores, or they belong to rows it never stores).
  __device__ __forceinline__ float apply(float x, int query, int key, int n_q, int n_k) const {
#if MASK
    if (query < n_q && key < n_k) {
      const MASK_T m = p[query * sq + key * sk];
#if MASK_BOOL
      x = m ? x : -KZ_INF;
#else
      x += kz_to_float(m) * LOG2E;
#endif
    }
#endif
    return x;
  }
};

// The scores of a warp's C fragments in log2 units: s·scale_log2, the attn_mask applied, and -inf where the
// causal mask or the key bound drops them. Fragment element (i, j, e) sits at row row0 + 16i + g + 8·(e/2),
// column col0 + 8j + 2t + e%2. Rows are queries and columns keys, or (KEY_ROWS, the backward's dK/dV pass)
// the other way round. MASKED: apply the causal mask and the key bound (KEY_ROWS: the causal mask; rows past
// n_k are never stored); tiles that need neither skip the arithmetic.
template <bool MASKED, bool KEY_ROWS, int MT, int NI>
__device__ __forceinline__ void mask_scores(float (&s)[MT][NI / 8][4], int row0, int col0, int n_q, int n_k,
                                            float scale_log2, const AttnMask& mask) {
  const int lane = threadIdx.x % 32;
#pragma unroll
  for (int i = 0; i < MT; ++i)
#pragma unroll
    for (int j = 0; j < NI / 8; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int row = row0 + i * 16 + lane / 4 + e / 2 * 8, col = col0 + j * 8 + lane % 4 * 2 + e % 2;
        float x = s[i][j][e] * scale_log2;
        if (MASK) x = KEY_ROWS ? mask.apply(x, col, row, n_q, n_k) : mask.apply(x, row, col, n_q, n_k);
        if (MASKED) {
          const bool drop = KEY_ROWS ? (CAUSAL && row > col) : (col >= n_k || (CAUSAL && col > row));
          if (drop) x = -KZ_INF;
        }
        s[i][j][e] = x;
      }
}

// Rows row0 .. of a warp's C fragments (16·MT × HEAD_DIM, float32) rounded to O (T, or another 16-bit float)
// and written to rows row0 .. of a matrix (row r at g + r·stride, d columns; rows ≥ n_rows dropped), through
// the warp's own 16·MT rows of a shared tile (stage) so that global stores are 16-byte chunks along rows.
template <int MT, typename O = T>
__device__ __forceinline__ void store_rows(const float (&acc)[MT][ND][4], O* stage, O* g, i64 stride, int row0,
                                           int n_rows, int d) {
  static_assert(sizeof(O) == 2, "rows of 16-bit elements: 8 a 16-byte chunk");
  const int lane = threadIdx.x % 32;
#pragma unroll
  for (int i = 0; i < MT; ++i)
#pragma unroll
    for (int jd = 0; jd < ND; ++jd) {
      O* p = stage + (i * 16 + lane / 4) * LDS + jd * 8 + lane % 4 * 2;
      *reinterpret_cast<unsigned*>(p) = pack_pair(acc[i][jd][0], acc[i][jd][1], O{});
      *reinterpret_cast<unsigned*>(p + 8 * LDS) = pack_pair(acc[i][jd][2], acc[i][jd][3], O{});
    }
  __syncwarp();
  constexpr int CHUNKS = MT * 16 * CPR;
#pragma unroll
  for (int c = lane; c < CHUNKS; c += 32) {
    const int r = c / CPR, col = c % CPR * 8;
    if (row0 + r < n_rows && col < d)
      *reinterpret_cast<uint4*>(g + (row0 + r) * stride + col) = *reinterpret_cast<const uint4*>(stage + r * LDS + col);
  }
}

template <int MT>
__device__ __forceinline__ void scale_rows(float (&acc)[MT][ND][4], float f) {
#pragma unroll
  for (int i = 0; i < MT; ++i)
#pragma unroll
    for (int jd = 0; jd < ND; ++jd)
#pragma unroll
      for (int e = 0; e < 4; ++e) acc[i][jd][e] *= f;
}
