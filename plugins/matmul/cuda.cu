// C[z] = A[z] @ B[z]: A is M×K, B is K×N, C is M×N, all row-major and contiguous; z = blockIdx.z is the
// batch, A and B advance by their batch strides (0 broadcasts a batch of 1), C by M·N.
//
// Each block computes a BM×BN tile of C, stepping over K by BK through a STAGES-deep ring of shared-memory
// tiles filled by cp.async: while tile k is multiplied, tiles k+1 .. k+STAGES-1 are in flight. Blocks
// are numbered in groups of GROUP_M tile-rows (as in Triton's tutorial), so the blocks resident at one
// time share B tiles and A rows in L2. Every load past M, N or K is zero-filled: 0·0 adds nothing.
//
// fp16 / bf16 (KZ_TENSOR_CORES): warps of a (BM/WM)×(BN/WN) grid each own a WM×WN tile, made of
// 16×8 mma.sync.m16n8k16 tiles accumulated in float32. Fragments come from shared memory by ldmatrix.
// float32: a SIMT kernel; each thread owns an 8×8 tile of C, four 4×4 quads half a tile apart, read
// as float4 from A stored transposed (k-major) and B; it stays IEEE float32 throughout.
//
// Two entry points each: the *_aligned one copies 16-byte chunks and needs 16-byte aligned rows (the
// wrapper checks: K and N multiples of 8 for fp16 / bf16, N a multiple of 4 for float32's B, aligned
// pointers); the *_guarded one loads element by element and takes any M, N, K and any pointer.
//
// WGMMA 1 (fp16 / bf16, and float32 in TF32 with TF32 1, on sm_90, compiled for sm_90a): matmul_wgmma, Hopper's
// warpgroup MMAs fed by TMA copies through an mbarrier ring from a producer warpgroup, a persistent grid
// (../_gemm/hopper.cuh). It needs 16-byte aligned rows or columns; other calls and dtypes take the kernels here.
#ifndef BM
#define BM 128
#endif
#ifndef BN
#define BN 256
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
#define STAGES 4
#endif
#define GROUP_M 8

#ifndef WGMMA
#define WGMMA 0
#endif

// cp.async, ldmatrix and mma.sync m16n8k16
#include "../_cuda/tensor_core.cuh"

#if WGMMA && (KZ_TENSOR_CORES || TF32)  // IEEE float32 takes the SIMT kernel below whatever the config
#include "../_gemm/hopper.cuh"
#else

// Block index -> (tile row, tile column), GROUP_M tile rows at a time sweeping the columns.
__device__ __forceinline__ void tile_of_block(int M, int N, int& tile_m, int& tile_n) {
  const int tiles_m = (M + BM - 1) / BM, tiles_n = (N + BN - 1) / BN;
  const int pid = blockIdx.x, per_group = GROUP_M * tiles_n;
  const int first_m = pid / per_group * GROUP_M;
  const int group_m = tiles_m - first_m < GROUP_M ? tiles_m - first_m : GROUP_M;
  tile_m = first_m + pid % per_group % group_m;
  tile_n = pid % per_group / group_m;
}

#if KZ_TENSOR_CORES
// ---------------------------------------------------------------------------------------------------
// fp16 / bf16 on tensor cores
// ---------------------------------------------------------------------------------------------------
#define WARPS_M (BM / WM)
#define WARPS_N (BN / WN)
#define THREADS (32 * WARPS_M * WARPS_N)
#define MT (WM / 16)  // m16 tiles per warp
#define NT (WN / 8)   // n8 tiles per warp (even: B fragments come two n8 tiles per ldmatrix.x4)
// Shared rows padded by 8 elements (16 bytes): the 8 rows one ldmatrix phase reads start 16·(odd) bytes
// apart mod 128, so they fall in 8 different bank groups (no conflicts), and stay 16-byte aligned.
#define A_LD (BK + 8)
#define B_LD (BN + 8)
#define A_TILE (BM * A_LD)
#define B_TILE (BK * B_LD)

struct __align__(16) kz_chunk { unsigned x, y, z, w; };  // 8 elements of 2 bytes

// 8 elements src[0..8) into 16 bytes of shared memory at dst; zeros unless ok, and past valid elements.
template <bool ALIGNED>
__device__ __forceinline__ void load_chunk(T* dst, const T* src, bool ok, int valid) {
  if (ALIGNED) {  // K and N are multiples of 8: a chunk that starts in range is whole
    cp_async16(dst, src, ok ? 16 : 0);
  } else {
    unsigned short v[8];
#pragma unroll
    for (int e = 0; e < 8; ++e) v[e] = ok && e < valid ? src[e].x : (unsigned short)0;
    *reinterpret_cast<kz_chunk*>(dst) = kz_chunk{v[0] | (unsigned)v[1] << 16, v[2] | (unsigned)v[3] << 16,
                                                 v[4] | (unsigned)v[5] << 16, v[6] | (unsigned)v[7] << 16};
  }
}

// Tile k0 of A (BM×BK at rows m0) and of B (BK×BN at columns n0) into one stage of shared memory.
template <bool ALIGNED>
__device__ __forceinline__ void load_tiles(T* sa, T* sb, const T* a, const T* b, int M, int N, int K, int m0,
                                           int n0, int k0, int tid) {
  constexpr int A_CHUNKS = BM * BK / 8, B_CHUNKS = BK * BN / 8;
#pragma unroll
  for (int i = 0; i < (A_CHUNKS + THREADS - 1) / THREADS; ++i) {
    const int c = tid + i * THREADS, r = c / (BK / 8), col = c % (BK / 8) * 8;
    if (A_CHUNKS % THREADS == 0 || c < A_CHUNKS) {
      const int m = m0 + r, k = k0 + col;
      const bool ok = m < M && k < K;  // out of range: point at the base (zero bytes are read)
      load_chunk<ALIGNED>(sa + r * A_LD + col, ok ? a + (long long)m * K + k : a, ok, K - k);
    }
  }
#pragma unroll
  for (int i = 0; i < (B_CHUNKS + THREADS - 1) / THREADS; ++i) {
    const int c = tid + i * THREADS, r = c / (BN / 8), col = c % (BN / 8) * 8;
    if (B_CHUNKS % THREADS == 0 || c < B_CHUNKS) {
      const int k = k0 + r, n = n0 + col;
      const bool ok = k < K && n < N;
      load_chunk<ALIGNED>(sb + r * B_LD + col, ok ? b + (long long)k * N + n : b, ok, N - n);
    }
  }
}

// Two adjacent outputs of one row; a 4-byte store where both exist and the row is 4-byte aligned.
template <bool ALIGNED>
__device__ __forceinline__ void store_pair(T* c, int M, int N, int row, int col, float v0, float v1) {
  if (row >= M) return;
  T* p = c + (long long)row * N + col;
  if (ALIGNED) {  // N is a multiple of 8 and col even: both in range or neither, and p 4-byte aligned
    if (col < N) {
      struct __align__(4) pair { T x, y; };
      *reinterpret_cast<pair*>(p) = pair{kz_from_float<T>(v0), kz_from_float<T>(v1)};
    }
  } else {
    if (col < N) p[0] = kz_from_float<T>(v0);
    if (col + 1 < N) p[1] = kz_from_float<T>(v1);
  }
}

template <bool ALIGNED>
__device__ __forceinline__ void matmul_tc(const T* __restrict__ a, const T* __restrict__ b, T* __restrict__ c,
                                          int M, int N, int K, long long a_batch, long long b_batch) {
  extern __shared__ __align__(16) unsigned char smem[];
  T* sa = reinterpret_cast<T*>(smem);  // STAGES A tiles, then STAGES B tiles
  T* sb = sa + STAGES * A_TILE;
  a += blockIdx.z * a_batch;
  b += blockIdx.z * b_batch;
  c += blockIdx.z * (long long)M * N;
  int tile_m, tile_n;
  tile_of_block(M, N, tile_m, tile_n);
  const int m0 = tile_m * BM, n0 = tile_n * BN;
  const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
  const int wm = warp / WARPS_N * WM, wn = warp % WARPS_N * WN;  // the warp's tile within the block's

  float acc[MT][NT][4];
#pragma unroll
  for (int i = 0; i < MT; ++i)
#pragma unroll
    for (int j = 0; j < NT; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) acc[i][j][e] = 0.0f;

  const int k_tiles = (K + BK - 1) / BK;
#pragma unroll
  for (int s = 0; s < STAGES - 1; ++s) {  // prologue: tiles 0 .. STAGES-2 in flight
    if (s < k_tiles) load_tiles<ALIGNED>(sa + s * A_TILE, sb + s * B_TILE, a, b, M, N, K, m0, n0, s * BK, tid);
    cp_async_commit();  // one group per tile, empty ones included: the wait count below stays exact
  }
  for (int kt = 0; kt < k_tiles; ++kt) {
    // STAGES-1+kt groups committed; all but the newest STAGES-2 done => tile kt has landed (ours);
    // the barrier makes everyone's land, and frees the stage everyone read in iteration kt-1.
    cp_async_wait<STAGES - 2>();
    __syncthreads();
    const int next = kt + STAGES - 1;
    if (next < k_tiles)
      load_tiles<ALIGNED>(sa + next % STAGES * A_TILE, sb + next % STAGES * B_TILE, a, b, M, N, K, m0, n0,
                          next * BK, tid);
    cp_async_commit();

    const T* ta = sa + kt % STAGES * A_TILE + wm * A_LD;
    const T* tb = sb + kt % STAGES * B_TILE + wn;
#pragma unroll
    for (int kk = 0; kk < BK; kk += 16) {
      unsigned af[MT][4], bf[NT][2];
      // A, m16×k16 at rows 16i: matrices (rows 0-7, k 0-7), (8-15, 0-7), (0-7, 8-15), (8-15, 8-15) =
      // a0..a3 of mma.m16n8k16; lane l points at row l%16, k 8·(l/16).
#pragma unroll
      for (int i = 0; i < MT; ++i) ldmatrix_x4(af[i], ta + (i * 16 + lane % 16) * A_LD + kk + lane / 16 * 8);
      // B, k16×n16 at columns 8j (two n8 tiles), stored k-major: transposed loads of matrices
      // (k 0-7, n 0-7), (k 8-15, n 0-7), (k 0-7, n 8-15), (k 8-15, n 8-15) = b0, b1 of tile j, b0, b1 of
      // tile j+1; lane l points at k row l%16, column 8j + 8·(l/16).
#pragma unroll
      for (int j = 0; j < NT; j += 2) {
        unsigned r[4];
        ldmatrix_x4_trans(r, tb + (kk + lane % 16) * B_LD + j * 8 + lane / 16 * 8);
        bf[j][0] = r[0], bf[j][1] = r[1], bf[j + 1][0] = r[2], bf[j + 1][1] = r[3];
      }
#pragma unroll
      for (int i = 0; i < MT; ++i)
#pragma unroll
        for (int j = 0; j < NT; ++j) mma_16816(acc[i][j], af[i], bf[j], T{});
    }
  }
  cp_async_wait<0>();  // only empty groups can be left; nothing may be in flight at exit

  // D fragment of tile (i, j): d0, d1 at row g = lane/4, columns 2·(lane%4) and +1; d2, d3 at row g+8.
  const int row = m0 + wm + lane / 4, col = n0 + wn + lane % 4 * 2;
#pragma unroll
  for (int i = 0; i < MT; ++i)
#pragma unroll
    for (int j = 0; j < NT; ++j) {
      store_pair<ALIGNED>(c, M, N, row + i * 16, col + j * 8, acc[i][j][0], acc[i][j][1]);
      store_pair<ALIGNED>(c, M, N, row + i * 16 + 8, col + j * 8, acc[i][j][2], acc[i][j][3]);
    }
}

extern "C" __global__ void __launch_bounds__(THREADS)
    matmul_aligned(const T* a, const T* b, T* c, int M, int N, int K, long long a_batch, long long b_batch) {
  matmul_tc<true>(a, b, c, M, N, K, a_batch, b_batch);
}
extern "C" __global__ void __launch_bounds__(THREADS)
    matmul_guarded(const T* a, const T* b, T* c, int M, int N, int K, long long a_batch, long long b_batch) {
  matmul_tc<false>(a, b, c, M, N, K, a_batch, b_batch);
}

#else
// ---------------------------------------------------------------------------------------------------
// float32 on the FMA units
// ---------------------------------------------------------------------------------------------------
#define TM 8
#define TN 8
#define THREADS_N (BN / TN)
#define THREADS ((BM / TM) * THREADS_N)
// A is stored transposed, k-major: a thread's 4 consecutive rows are one float4. +4 keeps rows 16-byte
// aligned and spreads the transposing 4-byte writes of one warp (32 consecutive k) over 8 banks, not 1.
#define A_LD (BM + 4)
#define B_LD BN
#define A_TILE (BK * A_LD)
#define B_TILE (BK * B_LD)

template <bool ALIGNED>
__device__ __forceinline__ void load_tiles(float* sa, float* sb, const float* a, const float* b, int M, int N,
                                           int K, int m0, int n0, int k0, int tid) {
  // A: one element per copy, consecutive threads along k (coalesced reads), written to sa[k][m]
  constexpr int A_ELEMENTS = BM * BK;
#pragma unroll
  for (int i = 0; i < (A_ELEMENTS + THREADS - 1) / THREADS; ++i) {
    const int e = tid + i * THREADS, r = e / BK, kk = e % BK;
    if (A_ELEMENTS % THREADS == 0 || e < A_ELEMENTS) {
      const int m = m0 + r, k = k0 + kk;
      const bool ok = m < M && k < K;
      cp_async4(sa + kk * A_LD + r, ok ? a + (long long)m * K + k : a, ok ? 4 : 0);
    }
  }
  if (ALIGNED) {  // B in 16-byte chunks: N is a multiple of 4, so a chunk is all in range or all out
    constexpr int B_CHUNKS = BK * BN / 4;
#pragma unroll
    for (int i = 0; i < (B_CHUNKS + THREADS - 1) / THREADS; ++i) {
      const int c = tid + i * THREADS, r = c / (BN / 4), col = c % (BN / 4) * 4;
      if (B_CHUNKS % THREADS == 0 || c < B_CHUNKS) {
        const int k = k0 + r, n = n0 + col;
        const bool ok = k < K && n < N;
        cp_async16(sb + r * B_LD + col, ok ? b + (long long)k * N + n : b, ok ? 16 : 0);
      }
    }
  } else {
    constexpr int B_ELEMENTS = BK * BN;
#pragma unroll 4
    for (int i = 0; i < (B_ELEMENTS + THREADS - 1) / THREADS; ++i) {
      const int e = tid + i * THREADS, r = e / BN, col = e % BN;
      if (B_ELEMENTS % THREADS == 0 || e < B_ELEMENTS) {
        const int k = k0 + r, n = n0 + col;
        const bool ok = k < K && n < N;
        cp_async4(sb + r * B_LD + col, ok ? b + (long long)k * N + n : b, ok ? 4 : 0);
      }
    }
  }
}

// Four adjacent outputs of one row: one float4 store where all exist (16-byte aligned when ALIGNED).
template <bool ALIGNED>
__device__ __forceinline__ void store_quad(float* c, int M, int N, int row, int col, const float* v) {
  if (row >= M) return;
  float* p = c + (long long)row * N + col;
  if (ALIGNED && col + 3 < N) {
    *reinterpret_cast<float4*>(p) = make_float4(v[0], v[1], v[2], v[3]);
  } else {
#pragma unroll
    for (int e = 0; e < 4; ++e)
      if (col + e < N) p[e] = v[e];
  }
}

template <bool ALIGNED>
__device__ __forceinline__ void matmul_simt(const float* __restrict__ a, const float* __restrict__ b,
                                            float* __restrict__ c, int M, int N, int K, long long a_batch,
                                            long long b_batch) {
  extern __shared__ __align__(16) unsigned char smem[];
  float* sa = reinterpret_cast<float*>(smem);
  float* sb = sa + STAGES * A_TILE;
  a += blockIdx.z * a_batch;
  b += blockIdx.z * b_batch;
  c += blockIdx.z * (long long)M * N;
  int tile_m, tile_n;
  tile_of_block(M, N, tile_m, tile_n);
  const int m0 = tile_m * BM, n0 = tile_n * BN;
  const int tid = threadIdx.x, tx = tid % THREADS_N, ty = tid / THREADS_N;
  // rows ty·4 + {0..3} and BM/2 + ty·4 + {0..3}; columns likewise with tx and BN/2: neighbouring threads
  // read neighbouring float4s of B (one 512-byte sweep per warp, no bank conflict)
  float acc[TM][TN];
#pragma unroll
  for (int i = 0; i < TM; ++i)
#pragma unroll
    for (int j = 0; j < TN; ++j) acc[i][j] = 0.0f;

  const int k_tiles = (K + BK - 1) / BK;
#pragma unroll
  for (int s = 0; s < STAGES - 1; ++s) {
    if (s < k_tiles) load_tiles<ALIGNED>(sa + s * A_TILE, sb + s * B_TILE, a, b, M, N, K, m0, n0, s * BK, tid);
    cp_async_commit();
  }
  for (int kt = 0; kt < k_tiles; ++kt) {
    cp_async_wait<STAGES - 2>();  // as in the tensor-core kernel: tile kt landed, stage kt-1 free
    __syncthreads();
    const int next = kt + STAGES - 1;
    if (next < k_tiles)
      load_tiles<ALIGNED>(sa + next % STAGES * A_TILE, sb + next % STAGES * B_TILE, a, b, M, N, K, m0, n0,
                          next * BK, tid);
    cp_async_commit();

    const float* ta = sa + kt % STAGES * A_TILE + ty * 4;
    const float* tb = sb + kt % STAGES * B_TILE + tx * 4;
#pragma unroll
    for (int k = 0; k < BK; ++k) {
      const float4 a0 = *reinterpret_cast<const float4*>(ta + k * A_LD);
      const float4 a1 = *reinterpret_cast<const float4*>(ta + k * A_LD + BM / 2);
      const float4 b0 = *reinterpret_cast<const float4*>(tb + k * B_LD);
      const float4 b1 = *reinterpret_cast<const float4*>(tb + k * B_LD + BN / 2);
      const float av[TM] = {a0.x, a0.y, a0.z, a0.w, a1.x, a1.y, a1.z, a1.w};
      const float bv[TN] = {b0.x, b0.y, b0.z, b0.w, b1.x, b1.y, b1.z, b1.w};
#pragma unroll
      for (int i = 0; i < TM; ++i)
#pragma unroll
        for (int j = 0; j < TN; ++j) acc[i][j] = fmaf(av[i], bv[j], acc[i][j]);
    }
  }
  cp_async_wait<0>();

#pragma unroll
  for (int i = 0; i < TM; ++i) {
    const int row = m0 + (i < 4 ? ty * 4 + i : BM / 2 + ty * 4 + i - 4);
    store_quad<ALIGNED>(c, M, N, row, n0 + tx * 4, acc[i]);
    store_quad<ALIGNED>(c, M, N, row, n0 + BN / 2 + tx * 4, acc[i] + 4);
  }
}

extern "C" __global__ void __launch_bounds__(THREADS)
    matmul_aligned(const float* a, const float* b, float* c, int M, int N, int K, long long a_batch,
                   long long b_batch) {
  matmul_simt<true>(a, b, c, M, N, K, a_batch, b_batch);
}
extern "C" __global__ void __launch_bounds__(THREADS)
    matmul_guarded(const float* a, const float* b, float* c, int M, int N, int K, long long a_batch,
                   long long b_batch) {
  matmul_simt<false>(a, b, c, M, N, K, a_batch, b_batch);
}
#endif
#endif  // WGMMA
