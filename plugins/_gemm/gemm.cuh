// Tiled GEMM core shared by the cuda plugins of linear, linear_backward, conv2d and conv2d_backward
// (pasted into their cuda.cu by `#include "../_gemm/gemm.cuh"`, see kernelzoo/backends/sources.py).
//
// A block computes one BM×BN tile D = A·B of a *problem*, stepping over the reduction by BK through a
// STAGES-deep ring of shared-memory tiles filled by cp.async: while tile kt is multiplied, tiles
// kt+1 .. kt+STAGES-1 are in flight. A problem is a struct that says where operands come from and
// where results go:
//
//   static constexpr bool A_GK, B_GK;  // is A(m, k) (B(k, n)) contiguous along k in global memory?
//   void load(T* sa, T* sb, int kt);   // k-tile kt of A (BM×BK) and B (BK×BN) into one stage, through
//                                      // Operand<..>::chunk/copy; called for kt = 0, 1, 2, .. in order
//   Col column(int n);                 // per output column n (even): what the stores of it need
//   void store(int m, const Col& col, float v0, float v1);  // D(m, n) and D(m, n+1)
//
// Operands travel as 16-byte chunks of VEC elements along their global-contiguous dimension; the
// problem gives each chunk's address, or none (zeros): a strided matrix, or an im2col gather.
//
// fp16 / bf16 (KZ_TENSOR_CORES): warps of a (BM/WM)×(BN/WN) grid each own a WM×WN tile of
// mma.sync.m16n8k16 accumulators (float32). Shared tiles keep the global-contiguous dimension
// contiguous ([rows][BK+8] or [BK][rows+8]: +8 elements (16 bytes) put the 8 rows of one ldmatrix
// phase in 8 different bank groups) and fragments come by ldmatrix, .trans where a tile is stored
// [BK][rows] (mma wants A's fragments k-contiguous and B's too).
// float32: SIMT; each thread owns an 8×8 register tile (four 4×4 quads half a tile apart), both
// operands stored k-major ([BK][rows+4]) for float4 reads; IEEE float32 throughout.
#ifndef BM
#define BM 128
#endif
#ifndef BN
#define BN 128
#endif
#ifndef BK
#define BK 32
#endif
#ifndef WM
#define WM 64
#endif
#ifndef WN
#define WN 64
#endif
#ifndef STAGES
#define STAGES 3
#endif
#define GROUP_M 8

#if KZ_TENSOR_CORES
#define VEC 8  // elements per 16-byte chunk
#define WARPS_N (BN / WN)
#define THREADS (32 * (BM / WM) * (BN / WN))
#define MT (WM / 16)  // m16 tiles per warp
#define NT (WN / 8)   // n8 tiles per warp (even: B fragments come two n8 tiles per ldmatrix.x4)
#else
#define VEC 4
#define THREADS_N (BN / 8)
#define THREADS ((BM / 8) * (BN / 8))
#endif

// cp.async, ldmatrix and mma.sync wrappers, shared with the flash-attention kernels
#include "../_cuda/tensor_core.cuh"
// activate(): the epilogue's activation, chosen by KZ_ACTIVATION (none by default)
#include "activation.cuh"

typedef long long i64;

template <class X>
struct __align__(16) Chunk16 { X e[16 / sizeof(X)]; };
template <class X>
struct __align__(2 * sizeof(X)) Pair { X x, y; };

// Two adjacent outputs in one store; p must be aligned to two elements.
__device__ __forceinline__ void store_pair(T* p, float v0, float v1) {
  *reinterpret_cast<Pair<T>*>(p) = Pair<T>{kz_from_float<T>(v0), kz_from_float<T>(v1)};
}

// How many of the VEC elements from position `left` before an end exist: 0 .. VEC.
__device__ __forceinline__ int chunk_valid(int left) { return left <= 0 ? 0 : left < VEC ? left : VEC; }

// One operand's tile in shared memory: ROWS (BM for A, BN for B) × BK, and its 16-byte chunks.
template <bool GK, int ROWS>
struct Operand {
  static constexpr int CHUNKS = ROWS * BK / VEC;
  static constexpr int PER_THREAD = (CHUNKS + THREADS - 1) / THREADS;
  static constexpr int ALONG = GK ? BK / VEC : ROWS / VEC;  // chunks across the contiguous dimension
  // Each thread's chunks all sit at one position across the contiguous dimension (threadIdx.x % ALONG),
  // so a problem may keep per-thread state for it (a conv's tap, a column's decomposition).
  static_assert(THREADS % ALONG == 0, "a thread's chunks must share their position along the contiguous dim");
#if KZ_TENSOR_CORES
  static constexpr bool SK = GK;  // stored contiguous along k
  static constexpr int LD = GK ? BK + 8 : ROWS + 8;
#else
  static constexpr bool SK = false;
  static constexpr int LD = ROWS + 4;  // +4 floats: float4-aligned rows, transposing stores spread over banks
#endif
  static constexpr int SIZE = SK ? ROWS * LD : BK * LD;  // elements per stage

  // Chunk i of this thread: its first element's (row, k) in the tile; false past the tile's chunks.
  __device__ static bool chunk(int i, int& row, int& k) {
    const int c = threadIdx.x + i * THREADS;
    if (GK) {
      row = c / ALONG, k = c % ALONG * VEC;
    } else {
      k = c / ALONG, row = c % ALONG * VEC;
    }
    return CHUNKS % THREADS == 0 || c < CHUNKS;
  }
  __device__ static T* at(T* s, int row, int k) { return SK ? s + row * LD + k : s + k * LD + row; }

  // VEC elements from src along the global-contiguous dimension (k if GK, else rows) into the tile at
  // (row, k); those at or past `valid` are zeros. ALIGNED: src is 16-byte aligned and valid is 0 or VEC
  // (src is then only a valid address, never read, when valid is 0); else element loads of valid ones.
  template <bool ALIGNED>
  __device__ static void copy(T* s, int row, int k, const T* src, int valid) {
    if (ALIGNED && SK == GK) {
      cp_async16(at(s, row, k), src, valid > 0 ? 16 : 0);
    } else if (ALIGNED) {  // float32 with a k-contiguous source into a k-major tile: element by element
#pragma unroll
      for (int e = 0; e < VEC; ++e) cp_async4(at(s, row, k + e), src + (valid > 0 ? e : 0), valid > 0 ? 4 : 0);
    } else {
      Chunk16<T> v;
#pragma unroll
      for (int e = 0; e < VEC; ++e) v.e[e] = e < valid ? src[e] : T{};
      if (SK == GK) {
        *reinterpret_cast<Chunk16<T>*>(at(s, row, k)) = v;
      } else {
#pragma unroll
        for (int e = 0; e < VEC; ++e) *at(s, row, k + e) = v.e[e];
      }
    }
  }
};

// This block's tile (m0, n0) of an M×N output, blocks numbered in groups of GROUP_M tile rows (as in
// Triton's tutorial) so that the blocks resident together share operand tiles in L2.
__device__ __forceinline__ void block_tile(int M, int N, int& m0, int& n0) {
  const int tiles_m = (M + BM - 1) / BM, tiles_n = (N + BN - 1) / BN;
  const int pid = blockIdx.x, per_group = GROUP_M * tiles_n;
  const int first_m = pid / per_group * GROUP_M;
  const int group_m = tiles_m - first_m < GROUP_M ? tiles_m - first_m : GROUP_M;
  m0 = (first_m + pid % per_group % group_m) * BM;
  n0 = pid % per_group / group_m * BN;
}

// The problem's tile at (m0, n0) over k-tiles 0 .. k_tiles-1 (its load numbers them from 0), stored through
// its column()/store(). Needs STAGES·(A::SIZE + B::SIZE) elements of dynamic shared memory.
template <class P>
__device__ __forceinline__ void gemm_tile(P& p, int m0, int n0, int k_tiles) {
  using A = Operand<P::A_GK, BM>;
  using B = Operand<P::B_GK, BN>;
  extern __shared__ __align__(16) unsigned char smem[];
  T* sa = reinterpret_cast<T*>(smem);  // STAGES A tiles, then STAGES B tiles
  T* sb = sa + STAGES * A::SIZE;
#if KZ_TENSOR_CORES
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int wm = warp / WARPS_N * WM, wn = warp % WARPS_N * WN;  // the warp's tile within the block's
  float acc[MT][NT][4];
#pragma unroll
  for (int i = 0; i < MT; ++i)
#pragma unroll
    for (int j = 0; j < NT; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) acc[i][j][e] = 0.0f;
#else
  const int tx = threadIdx.x % THREADS_N, ty = threadIdx.x / THREADS_N;
  float acc[8][8];
#pragma unroll
  for (int i = 0; i < 8; ++i)
#pragma unroll
    for (int j = 0; j < 8; ++j) acc[i][j] = 0.0f;
#endif

#pragma unroll
  for (int s = 0; s < STAGES - 1; ++s) {  // prologue: tiles 0 .. STAGES-2 in flight
    if (s < k_tiles) p.load(sa + s * A::SIZE, sb + s * B::SIZE, s);
    cp_async_commit();  // one group per tile, empty ones included: the wait count below stays exact
  }
  for (int kt = 0; kt < k_tiles; ++kt) {
    // STAGES-1+kt groups committed; all but the newest STAGES-2 done => tile kt has landed (ours);
    // the barrier makes everyone's land, and frees the stage everyone read in iteration kt-1.
    cp_async_wait<STAGES - 2>();
    __syncthreads();
    const int next = kt + STAGES - 1;
    if (next < k_tiles) p.load(sa + next % STAGES * A::SIZE, sb + next % STAGES * B::SIZE, next);
    cp_async_commit();

    const T* ta = sa + kt % STAGES * A::SIZE;
    const T* tb = sb + kt % STAGES * B::SIZE;
#if KZ_TENSOR_CORES
#pragma unroll
    for (int kk = 0; kk < BK; kk += 16) {
      unsigned af[MT][4], bf[NT][2];
      // A, m16×k16 at rows 16i: matrices (m 0-7, k 0-7), (m 8-15, k 0-7), (m 0-7, k 8-15), (m 8-15, k 8-15)
      // are a0..a3 of mma.m16n8k16. Stored [m][k]: lane l points at row l%16, k 8·(l/16). Stored [k][m]:
      // lane l points at k row l%8 + 8·(l/16), m 8·((l/8)%2), and .trans turns each matrix round.
#pragma unroll
      for (int i = 0; i < MT; ++i) {
        if (A::SK) {
          ldmatrix_x4(af[i], ta + (wm + i * 16 + lane % 16) * A::LD + kk + lane / 16 * 8);
        } else {
          ldmatrix_x4_trans(af[i], ta + (kk + lane % 8 + lane / 16 * 8) * A::LD + wm + i * 16 + lane / 8 % 2 * 8);
        }
      }
      // B, k16×n16 at columns 8j (two n8 tiles): matrices (k 0-7, n 0-7), (k 8-15, n 0-7), (k 0-7, n 8-15),
      // (k 8-15, n 8-15) are b0, b1 of tile j and b0, b1 of tile j+1. Stored [k][n]: lane l points at k row
      // l%16, n 8·(l/16), .trans. Stored [n][k]: lane l points at n row l%8 + 8·(l/16), k 8·((l/8)%2).
#pragma unroll
      for (int j = 0; j < NT; j += 2) {
        unsigned r[4];
        if (B::SK) {
          ldmatrix_x4(r, tb + (wn + j * 8 + lane / 16 * 8 + lane % 8) * B::LD + kk + lane / 8 % 2 * 8);
        } else {
          ldmatrix_x4_trans(r, tb + (kk + lane % 16) * B::LD + wn + j * 8 + lane / 16 * 8);
        }
        bf[j][0] = r[0], bf[j][1] = r[1], bf[j + 1][0] = r[2], bf[j + 1][1] = r[3];
      }
#pragma unroll
      for (int i = 0; i < MT; ++i)
#pragma unroll
        for (int j = 0; j < NT; ++j) mma_16816(acc[i][j], af[i], bf[j], T{});
    }
#else
    // rows ty·4 + {0..3} and BM/2 + ty·4 + {0..3}; columns likewise with tx and BN/2: neighbouring
    // threads read neighbouring float4s of B (no bank conflict), a warp two float4s of A (broadcast)
    const float* a_k = ta + ty * 4;
    const float* b_k = tb + tx * 4;
#pragma unroll
    for (int k = 0; k < BK; ++k) {
      const float4 a0 = *reinterpret_cast<const float4*>(a_k + k * A::LD);
      const float4 a1 = *reinterpret_cast<const float4*>(a_k + k * A::LD + BM / 2);
      const float4 b0 = *reinterpret_cast<const float4*>(b_k + k * B::LD);
      const float4 b1 = *reinterpret_cast<const float4*>(b_k + k * B::LD + BN / 2);
      const float av[8] = {a0.x, a0.y, a0.z, a0.w, a1.x, a1.y, a1.z, a1.w};
      const float bv[8] = {b0.x, b0.y, b0.z, b0.w, b1.x, b1.y, b1.z, b1.w};
#pragma unroll
      for (int i = 0; i < 8; ++i)
#pragma unroll
        for (int j = 0; j < 8; ++j) acc[i][j] = fmaf(av[i], bv[j], acc[i][j]);
    }
#endif
  }
  cp_async_wait<0>();  // only empty groups can be left; nothing may be in flight at exit

#if KZ_TENSOR_CORES
  // D fragment of tile (i, j): d0, d1 at row lane/4, columns 2·(lane%4) and +1; d2, d3 at row lane/4 + 8.
  const int row = m0 + wm + lane / 4, col = n0 + wn + lane % 4 * 2;
  typename P::Col cols[NT];
#pragma unroll
  for (int j = 0; j < NT; ++j) cols[j] = p.column(col + j * 8);
#pragma unroll
  for (int i = 0; i < MT; ++i)
#pragma unroll
    for (int j = 0; j < NT; ++j) {
      p.store(row + i * 16, cols[j], acc[i][j][0], acc[i][j][1]);
      p.store(row + i * 16 + 8, cols[j], acc[i][j][2], acc[i][j][3]);
    }
#else
  typename P::Col cols[4];
#pragma unroll
  for (int q = 0; q < 4; ++q) cols[q] = p.column(n0 + q / 2 * (BN / 2) + tx * 4 + q % 2 * 2);
#pragma unroll
  for (int i = 0; i < 8; ++i) {
    const int row = m0 + (i < 4 ? ty * 4 + i : BM / 2 + ty * 4 + i - 4);
#pragma unroll
    for (int q = 0; q < 4; ++q) p.store(row, cols[q], acc[i][2 * q], acc[i][2 * q + 1]);
  }
#endif
}

// D = A·B for strided operands: A(m, k) = a[m·lda + k] (A_GK) or a[k·lda + m]; B(k, n) = b[n·ldb + k]
// (B_GK) or b[k·ldb + n]; D(m, n) goes to c[m·N + n], plus bias[n] (bias_rows 0) or bias[m] (1) if bias,
// through activate().
// ALIGNED: 16-byte chunks, which needs lda, ldb, the contiguous extents (K for a GK operand, M / N for
// the others) and N to be multiples of VEC and the pointers 16-byte aligned (the wrapper checks);
// otherwise element loads (any size, any pointer).
template <bool A_GK_, bool B_GK_, bool ALIGNED>
struct Strided {
  static constexpr bool A_GK = A_GK_, B_GK = B_GK_;
  using AOp = Operand<A_GK, BM>;
  using BOp = Operand<B_GK, BN>;
  const T* a;
  const T* b;
  T* c;
  const T* bias;
  int M, N, K, bias_rows, m0, n0;
  i64 lda, ldb;

  __device__ void load(T* sa, T* sb, int kt) {
    const int k0 = kt * BK;
#pragma unroll
    for (int i = 0; i < AOp::PER_THREAD; ++i) {
      int row, k;
      if (!AOp::chunk(i, row, k)) continue;
      const int m = m0 + row, kk = k0 + k;
      const int valid = A_GK ? (m < M ? chunk_valid(K - kk) : 0) : (kk < K ? chunk_valid(M - m) : 0);
      const T* src = A_GK ? a + m * lda + kk : a + kk * lda + m;
      AOp::template copy<ALIGNED>(sa, row, k, valid > 0 ? src : a, valid);
    }
#pragma unroll
    for (int i = 0; i < BOp::PER_THREAD; ++i) {
      int row, k;
      if (!BOp::chunk(i, row, k)) continue;
      const int n = n0 + row, kk = k0 + k;
      const int valid = B_GK ? (n < N ? chunk_valid(K - kk) : 0) : (kk < K ? chunk_valid(N - n) : 0);
      const T* src = B_GK ? b + n * ldb + kk : b + kk * ldb + n;
      BOp::template copy<ALIGNED>(sb, row, k, valid > 0 ? src : b, valid);
    }
  }

  struct Col {
    int n;
    float b0, b1;  // the column biases
  };
  __device__ Col column(int n) const {
    Col col{n, 0.0f, 0.0f};
    if (bias != nullptr && !bias_rows) {
      if (n < N) col.b0 = kz_to_float(bias[n]);
      if (n + 1 < N) col.b1 = kz_to_float(bias[n + 1]);
    }
    return col;
  }
  __device__ void store(int m, const Col& col, float v0, float v1) const {
    if (m >= M || col.n >= N) return;
    const float row_bias = bias != nullptr && bias_rows ? kz_to_float(bias[m]) : 0.0f;
    T* out = c + (i64)m * N + col.n;
    v0 = activate(v0 + (col.b0 + row_bias));
    v1 = activate(v1 + (col.b1 + row_bias));
    if (ALIGNED) {  // N is a multiple of VEC: n + 1 < N too, and out is 2-element aligned
      store_pair(out, v0, v1);
    } else {
      out[0] = kz_from_float<T>(v0);
      if (col.n + 1 < N) out[1] = kz_from_float<T>(v1);
    }
  }
};

// A launch of Strided over an M×N grid of tiles (blockIdx.x) and a batch (blockIdx.z): a, b and c advance
// by their batch strides (0 shares an operand across the batch).
template <bool A_GK, bool B_GK, bool ALIGNED>
__device__ __forceinline__ void strided_gemm(const T* a, const T* b, T* c, const T* bias, int bias_rows, int M,
                                             int N, int K, i64 lda, i64 ldb, i64 a_batch, i64 b_batch) {
  Strided<A_GK, B_GK, ALIGNED> p;
  p.a = a + blockIdx.z * a_batch, p.b = b + blockIdx.z * b_batch, p.c = c + blockIdx.z * (i64)M * N;
  p.bias = bias, p.bias_rows = bias_rows, p.M = M, p.N = N, p.K = K, p.lda = lda, p.ldb = ldb;
  block_tile(M, N, p.m0, p.n0);
  gemm_tile(p, p.m0, p.n0, (K + BK - 1) / BK);
}
