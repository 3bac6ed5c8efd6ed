// The Hopper GEMM (sm_90a): C[z] = A[z]·B[z] for fp16 / bf16 on warpgroup MMAs, operands brought by the TMA unit;
// with TF32 1, float32 in TF32, and with SCALED 1, scaled_matmul's 8-bit float GEMM, on the same pipeline (below).
// A is M×K and B is K×N, each row-major or, with A_COL_MAJOR / B_COL_MAJOR, column-major (a transposed view),
// read as they lie through 3-d tensor maps (innermost dim, outer dim, batch; a batch of one is read at batch 0 by
// every z) whose strides the TMA unit needs in multiples of 16 bytes. C is M×N row-major (with C_COL_MAJOR,
// column-major), contiguous per batch.
// Defines: BM×BN the block tile, BK 64, STAGES, CONSUMERS (1 or 2 warpgroups), TMA_STORE, A_COL_MAJOR,
// B_COL_MAJOR; with TF32 1, BK 32 and C_COL_MAJOR; with SCALED 1, BK 128, A_F8, B_F8, PROMOTE_K, SCALE_ROWS, BIAS.
//
// A persistent grid: each block walks output tiles blockIdx.x, +gridDim.x, ... of the batch's tiles in grouped
// order (GROUP_M tile rows sweep the columns, so that the blocks in flight share A rows and B columns in L2).
//
// Warp specialization. The last warpgroup is the producer: its first thread issues, for each k-tile of each tile, the
// TMA boxes of A (one of 64 k × BM rows; column-major, BM/MN_LINE of MN_LINE m × BK k: 64 × 64, in TF32 32 × 32) and of
// B (BN/64 of 64 n × 64 k; column-major, one of 64 k × BN) into a stage of a STAGES-deep ring, on the stage's `full`
// mbarrier with the stage's bytes expected (whole boxes: elements past the matrix arrive as zeros and count). The
// CONSUMERS warpgroups before it each own BM/CONSUMERS rows of the tile (MW m64 blocks) and all BN columns: they wait
// on `full`, issue the k-tile's 4 k16 steps as one wgmma group and keep one group in flight, so that a stage is handed
// back on its `empty` mbarrier (every consumer thread arrives) once the group after it has been issued and its own has
// completed. Stage s of the ring is used for the k-tiles it ≡ s (mod STAGES) counted across the block's tiles: fill f
// waits on parity f & 1. With two consumers the producer gives its registers away (setmaxnreg), so that the 128
// accumulators a thread holds and the addressing around them stay in registers.
//
// Tiles in shared memory are 128-byte swizzled, as the TMA unit writes them and the descriptors read them
// (wgmma.cuh). A row-major operand's stage is [rows][64] (K-major: 8-row groups 1024 bytes apart; step kk of a
// k-tile starts 32·kk bytes into the lines); a column-major one's [rows/64][64][64], 64 k lines of 64 rows or
// columns (MN-major, the instruction's transpose bit: k rows 8 at a time 1024 bytes apart, 64-wide blocks 64·128
// bytes apart; step kk starts 16·kk lines in). So B, row-major K×N, is MN-major, and A's m64 block i starts
// 8192·i bytes in either way. Dynamic shared memory: 1024 bytes of alignment slack, STAGES A and B tiles, the
// staging tiles of TMA_STORE 1, 2·STAGES mbarriers.
//
// Epilogue: the accumulators (m16n8k16's C fragments, see wgmma.cuh) converted to T. TMA_STORE 0: stored from
// registers, two adjacent outputs a 4-byte store (where N is even), rows past M and columns past N left alone.
// TMA_STORE 1 (N a multiple of 8, for the TMA unit's strides): each
// 64×64 block of a consumer's rows goes through a 128-byte-swizzled staging tile in shared memory (two a
// consumer, taken in turn) and reaches C by one TMA store (whole 128-byte lines; the TMA unit leaves out what lies
// past M and N); the consumers go on to the next tile while the stores drain.
//
// TF32 1 (T float, when torch allows TF32 products): A and B float32, B K-major (column-major, B_COL_MAJOR 1), as
// the TF32 wgmma takes no transpose; a k-tile is one 128-byte line a row (BK 32) and a step (m64nNk8) 32 bytes of
// it, so again the tiles, descriptors and ring above. C is stored from registers. A row-major A is read by
// descriptor; a column-major one (A_COL_MAJOR 1: [BM/32][32][32] in a stage, lines of 32 rows, one box each) from
// registers, which the consumers load from the stage themselves: the TF32 wgmma takes A from registers in any
// layout. The host runs a row-major B, which the instruction cannot read, as Cᵀ = Bᵀ·Aᵀ: Bᵀ is this kernel's
// column-major A, Aᵀ its column-major B, and C_COL_MAJOR 1 stores the kernel's C transposed (C[z] is N×M
// column-major, the caller's M×N row-major). Thread (g, t) of warp w (g = lane / 4, t = lane % 4) loads rows p and
// p + 4 of each m64 block, p = 32·(w / 2) + 8·(w % 2) + g % 4 + 16·(g / 4), in place of the fragment's g and g + 8,
// so that the 32 lanes of each load hit 32 banks; the accumulators' rows are permuted alike, and the stores follow.
//
// SCALED 1 (scaled_matmul): A and B are 8-bit floats (AB_T: one byte; A_F8 and B_F8 the types, kz_e4m3 or kz_e5m2),
// both K-major: A row-major and B column-major (read through Bᵀ's map, B_COL_MAJOR 1), as the 8-bit float wgmma
// takes no transpose. A k-tile is still one 128-byte line a row (BK 128) and a step 32 bytes of it (k32), so the
// tiles, descriptors and ring are those above. Hopper's tensor cores add 8-bit float products in less than float32:
// the wgmma accumulators restart from zero every PROMOTE_K of K (PROMOTE_K / BK k-tiles) and are added into a second
// set, `total`, in float32; a tile's k-tiles are whole intervals, those past K read as zeros, so that every wait is
// known at compile time. With OVERLAP 1 the intervals alternate between two sets of wgmma accumulators, acc and
// acc2: an interval's sums are added into total once its successor's first MMAs are issued, so that the tensor cores
// run through the promotion instead of waiting for it (three sets of sums a consumer thread, against two), in runs
// of OVERLAP_RUN intervals; the intervals a tile has past whole runs go as without. The epilogue scales total
// (SCALE_ROWS 0: by scale_a[0]·scale_b[0]; 1: by scale_a[row]·scale_b[col]), adds bias[col] (BIAS 1) and converts
// to T, the output's type (float32 too, stored from registers).
#ifndef CONSUMERS
#define CONSUMERS 2
#endif
#ifndef GROUP_M
#define GROUP_M 8
#endif
#ifndef TMA_STORE
#define TMA_STORE 0
#endif
#ifndef A_COL_MAJOR
#define A_COL_MAJOR 0
#endif
#ifndef B_COL_MAJOR
#define B_COL_MAJOR 0
#endif
#ifndef SCALED
#define SCALED 0
#endif
#ifndef OVERLAP
#define OVERLAP 0  // SCALED: each promotion overlapped with the next interval's MMAs (two sets of wgmma sums)
#endif
#ifndef TF32
#define TF32 0
#endif
#ifndef C_COL_MAJOR
#define C_COL_MAJOR 0
#endif
#define A_IN_REGISTERS (TF32 && A_COL_MAJOR)  // the TF32 wgmma's A loaded into registers from an MN-major stage
#define RS_STEPS 2                            // k-tile steps a wgmma group of A_IN_REGISTERS (below)
#define MN_LINE (128 / (int)sizeof(AB_T))     // rows of an MN-major stage's 128-byte line (64, 32 in TF32)
#if SCALED
typedef unsigned char AB_T;  // the operands' 8-bit floats, as bytes
#define HOPPER_KERNEL scaled_matmul_wgmma
#define PROMOTE_TILES (PROMOTE_K / BK)  // k-tiles summed by the tensor cores between additions into total
#define OVERLAP_RUN 4  // OVERLAP: promotion intervals a pass of the consumer's overlapped loop (spelled out)
// k-tiles a tile takes: whole promotion intervals (the TMA unit reads zeros past K)
#define K_TILES(K) (((K) + PROMOTE_K - 1) / PROMOTE_K * PROMOTE_TILES)
#else
#define K_TILES(K) (((K) + BK - 1) / BK)
typedef T AB_T;
#define HOPPER_KERNEL matmul_wgmma
#endif
#define K_STEPS 4  // MMA steps a k-tile: 32 bytes of its 128-byte lines each (k16, k8 in TF32, k32 in 8 bits)
#define WG_ROWS (BM / CONSUMERS)  // rows of the tile a consumer warpgroup owns
#define MW (WG_ROWS / 64)         // its m64 blocks
#define NACC (BN / 2)             // accumulators a thread holds per m64 block
#define A_STAGE (BM * BK)         // elements of a stage's A tile
#define B_STAGE (BK * BN)
// A step in 16-byte units of a descriptor's start address: 32 bytes along K-major lines, 16 MN-major lines
#define A_STEP (A_COL_MAJOR ? 16 * 128 / 16 : 2)
#define B_STEP (B_COL_MAJOR ? 2 : 16 * 128 / 16)
#define KERNEL_THREADS (128 * (CONSUMERS + 1))
// registers a thread once the producer has given its own away (128·(2·232 + 40) = 64512 of the 65536)
#define CONSUMER_REGISTERS 232
#define PRODUCER_REGISTERS 40

static_assert(BK * sizeof(AB_T) == 128, "a k-tile is one 128-byte line a row (the 128-byte swizzle)");
static_assert(CONSUMERS == 1 || CONSUMERS == 2, "one or two consumer warpgroups");
static_assert(WG_ROWS % 64 == 0 && BM <= 256, "a consumer owns whole m64 blocks; a TMA box is up to 256 rows");
static_assert(BN == 64 || BN == 128 || BN == 256, "wgmma's N: 64, 128 or 256");
static_assert(MW * NACC * (SCALED ? 2 + OVERLAP : 1) <= (SCALED ? 192 : 128),
              "a consumer thread holds up to 128 accumulators (SCALED: 192 registers of sums, every set counted)");
static_assert(!OVERLAP || SCALED, "OVERLAP overlaps the promotion of 8-bit float sums");
#if TF32
static_assert(sizeof(T) == 4 && B_COL_MAJOR && !TMA_STORE && !SCALED,
              "TF32 wgmma reads float32 operands, B K-major (A from registers where it is not); C is stored from "
              "registers");
#endif
static_assert(A_IN_REGISTERS == C_COL_MAJOR && !(C_COL_MAJOR && TMA_STORE),
              "a column-major A in TF32 is the Bᵀ of Cᵀ = Bᵀ·Aᵀ, whose C is stored transposed from registers");
static_assert(K_STEPS % (2 * RS_STEPS) == 0, "a k-tile's wgmma groups take the two A register sets in turn");
#if SCALED
static_assert(!A_COL_MAJOR && B_COL_MAJOR, "8-bit float wgmma reads both operands K-major");
static_assert(PROMOTE_K % BK == 0 && PROMOTE_K > 0, "sums are promoted after whole k-tiles");
static_assert(!TMA_STORE || sizeof(T) == 2, "a staging tile's 128-byte line is 64 outputs of 16 bits");
#endif

typedef long long i64;

// wgmma descriptors and steps; mbarriers, TMA copies and setmaxnreg (tma.cuh, through it)
#include "../_cuda/wgmma.cuh"

// d (+)= A·B on one MMA step of a k-tile, in this build's instruction: A and B by descriptor, accumulate 0
// overwriting d.
__device__ __forceinline__ void hopper_step(float (&d)[BN / 2], u64 a, u64 b, int accumulate) {
#if SCALED
  wgmma_ss_f8(d, a, b, accumulate, A_F8{}, B_F8{});
#elif TF32
  wgmma_ss_tf32(d, a, b, accumulate);
#else
  wgmma_ss<A_COL_MAJOR, !B_COL_MAJOR>(d, a, b, accumulate, T{});
#endif
}

// Tile t of the batch's tiles_m × tiles_n tiles: its batch z and first row and column.
__device__ __forceinline__ void hopper_tile(int t, int tiles_m, int tiles_n, int& z, int& m0, int& n0) {
  const int per_batch = tiles_m * tiles_n, pid = t % per_batch;
  const int per_group = GROUP_M * tiles_n, first_m = pid / per_group * GROUP_M;
  const int group_m = tiles_m - first_m < GROUP_M ? tiles_m - first_m : GROUP_M;
  z = t / per_batch;
  m0 = (first_m + pid % per_group % group_m) * BM;
  n0 = pid % per_group / group_m * BN;
}

// Two adjacent outputs at p, aligned to the pair: one 4-byte store of 16-bit elements, one 8-byte one of floats.
template <class U>
__device__ __forceinline__ void hopper_pair(U* p, float v0, float v1) {
  *reinterpret_cast<unsigned*>(p) = pack_pair(v0, v1, U{});
}
__device__ __forceinline__ void hopper_pair(float* p, float v0, float v1) {
  *reinterpret_cast<float2*>(p) = make_float2(v0, v1);
}

// C(row, col) and C(row, col + 1) of this batch's C, where they exist (col is even): one store of the pair where N
// is even (both exist or neither, and the pair is aligned), else one store each. C_COL_MAJOR: C is stored
// column-major (M rows a column), the pair M elements apart.
__device__ __forceinline__ void hopper_store(T* c, int M, int N, int row, int col, float v0, float v1) {
  if (row >= M || col >= N) return;
#if C_COL_MAJOR
  T* p = c + (i64)col * M + row;
  p[0] = kz_from_float<T>(v0);
  if (col + 1 < N) p[M] = kz_from_float<T>(v1);
#else
  T* p = c + (i64)row * N + col;
  if (N % 2 == 0) {
    hopper_pair(p, v0, v1);
  } else {
    p[0] = kz_from_float<T>(v0);
    if (col + 1 < N) p[1] = kz_from_float<T>(v1);
  }
#endif
}

#if A_IN_REGISTERS
// Where this thread's TF32 A fragments lie in a column-major stage ([BM/32][BK][32] floats, 128-byte swizzled: k
// line L's chunk q at q ^ (L % 8)), in floats from the consumer's first row: a0 .. a3 of m64 block 0 and step 0
// (rows p, p + 4 at k = t; the same at k = t + 4; the file's header). Block i and step kk add 2048·i and 256·kk.
__device__ __forceinline__ void a_fragment_offsets(int (&o)[4], int warp, int lane) {
  const int g = lane / 4, t = lane % 4;
  const int block = warp / 2 * 32 * BK;                      // the 32-row block of row p
  const int chunk = warp % 2 * 2 + g / 4 * 4, within = g % 4;  // p's 16-byte chunk of its line, its float there
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    const int k = t + j / 2 * 4, q = chunk + j % 2;
    o[j] = block + k * 32 + (q ^ k) * 4 + within;
  }
}
#endif

#if SCALED
// The scaled output of total's v0, v1 at (row, col), (row, col + 1): times the scales (one each, or scale_a[row] and
// scale_b[col], [col + 1]; those past M and N are not read), plus bias[col], [col + 1] (BIAS 1).
__device__ __forceinline__ void scaled_pair(float& v0, float& v1, int row, int col, int M, int N,
                                            const float* __restrict__ scale_a, const float* __restrict__ scale_b,
                                            const T* __restrict__ bias) {
#if SCALE_ROWS
  const float sa = row < M ? scale_a[row] : 0.0f;
  v0 *= sa * (col < N ? scale_b[col] : 0.0f);
  v1 *= sa * (col + 1 < N ? scale_b[col + 1] : 0.0f);
#else
  const float s = scale_a[0] * scale_b[0];
  v0 *= s;
  v1 *= s;
#endif
#if BIAS
  if (col < N) v0 += kz_to_float(bias[col]);
  if (col + 1 < N) v1 += kz_to_float(bias[col + 1]);
#endif
}
#endif

// The kernel of the file's header. a_map, b_map: tensor maps of A (Ba, M, K) with boxes (BK, BM, 1) (column-major:
// of Aᵀ (Ba, K, M), boxes (MN_LINE, BK, 1): (64, 64, 1), in TF32 (32, 32, 1)) and of B (Bb, K, N) with boxes
// (64, 64, 1) (column-major: Bᵀ (Bb, N, K), boxes (BK, BN, 1)), 128-byte swizzled; a_batched / b_batched: whether
// A / B step with z (else batch 0 serves every z); c_map (TMA_STORE 1): C (batch, M, N) with boxes (64, 64, 1),
// 128-byte swizzled; SCALED 1: scale_a, scale_b (one float each, or M and N) and bias (N of T; unread where BIAS is
// 0). Grid: up to one block per SM, any number; block KERNEL_THREADS.
extern "C" __global__ void __launch_bounds__(KERNEL_THREADS, 1)
    HOPPER_KERNEL(const __grid_constant__ TensorMap a_map, const __grid_constant__ TensorMap b_map,
                  T* __restrict__ c, int M, int N, int K, int batch, int a_batched, int b_batched
#if TMA_STORE
                  , const __grid_constant__ TensorMap c_map
#endif
#if SCALED
                  , const float* __restrict__ scale_a, const float* __restrict__ scale_b, const T* __restrict__ bias
#endif
                  ) {
  extern __shared__ __align__(16) unsigned char smem_raw[];
  // STAGES A tiles, STAGES B tiles (each laid out as above), the staging tiles [CONSUMERS][2][64][64], mbarriers
  AB_T* sa = reinterpret_cast<AB_T*>(smem_raw + (1024 - smem_addr(smem_raw) % 1024) % 1024);
  AB_T* sb = sa + STAGES * A_STAGE;
  T* sc = reinterpret_cast<T*>(sb + STAGES * B_STAGE);
  u64* full = reinterpret_cast<u64*>(sc + TMA_STORE * CONSUMERS * 2 * 64 * 64);           // [STAGES]
  u64* empty = full + STAGES;                                                            // [STAGES]
  const int tiles_m = (M + BM - 1) / BM, tiles_n = (N + BN - 1) / BN, k_tiles = K_TILES(K);
  const int tiles = tiles_m * tiles_n * batch, wg = threadIdx.x / 128;

  if (threadIdx.x == 0) {
#pragma unroll
    for (int s = 0; s < STAGES; ++s) mbar_init(&full[s], 1), mbar_init(&empty[s], 128 * CONSUMERS);
    fence_mbarrier_init();
  }
  __syncthreads();

  if (wg == CONSUMERS) {  // the producer warpgroup
#if CONSUMERS == 2
    setmaxnreg_dec<PRODUCER_REGISTERS>();
#endif
    if (threadIdx.x == 128 * CONSUMERS) {
      int it = 0;  // k-tiles issued, over this block's tiles
      for (int t = blockIdx.x; t < tiles; t += gridDim.x) {
        int z, m0, n0;
        hopper_tile(t, tiles_m, tiles_n, z, m0, n0);
        const int za = a_batched ? z : 0, zb = b_batched ? z : 0;
        for (int kt = 0; kt < k_tiles; ++kt, ++it) {
          const int slot = it % STAGES;
          if (it >= STAGES) mbar_wait(&empty[slot], (it / STAGES - 1) & 1);  // fill it - STAGES consumed
          mbar_arrive_expect(&full[slot], (A_STAGE + B_STAGE) * (unsigned)sizeof(AB_T));
#if A_COL_MAJOR
#pragma unroll
          for (int mb = 0; mb < BM / MN_LINE; ++mb)
            tma_load_3d(sa + slot * A_STAGE + mb * MN_LINE * BK, &a_map, m0 + mb * MN_LINE, kt * BK, za,
                        &full[slot]);
#else
          tma_load_3d(sa + slot * A_STAGE, &a_map, kt * BK, m0, za, &full[slot]);
#endif
#if B_COL_MAJOR
          tma_load_3d(sb + slot * B_STAGE, &b_map, kt * BK, n0, zb, &full[slot]);
#else
#pragma unroll
          for (int cb = 0; cb < BN / 64; ++cb)
            tma_load_3d(sb + slot * B_STAGE + cb * BK * 64, &b_map, n0 + cb * 64, kt * BK, zb, &full[slot]);
#endif
        }
      }
    }
    return;
  }
#if CONSUMERS == 2
  setmaxnreg_inc<CONSUMER_REGISTERS>();
#endif

  // Descriptors of stage 0: this warpgroup's A rows and B (an MN-major operand's 64-wide blocks 64 lines apart).
  // Stages, m64 blocks and k16 steps move only the start address (16-byte units).
  const u64 a_desc = sw128_desc(sa + wg * WG_ROWS * BK, A_COL_MAJOR ? BK * 128 : 16);
  const u64 b_desc = sw128_desc(sb, B_COL_MAJOR ? 16 : BK * 128);
  [[maybe_unused]] constexpr int A_UNITS = A_STAGE * sizeof(AB_T) / 16;  // not read where A is in registers
  constexpr int B_UNITS = B_STAGE * sizeof(AB_T) / 16;
  const int warp = threadIdx.x % 128 / 32, lane = threadIdx.x % 32;

  float acc[MW][NACC];
#if A_IN_REGISTERS
  int a_offsets[4];
  a_fragment_offsets(a_offsets, warp, lane);
#endif
#if SCALED
  float total[MW][NACC];  // the sums in float32, promoted from acc (and acc2)
#endif
#if OVERLAP
  float acc2[MW][NACC];  // the wgmma sums of every second promotion interval
#endif
  int it = 0;  // k-tiles consumed, over this block's tiles (as the producer counts them)
#if TMA_STORE
  T* staging = sc + wg * 2 * 64 * 64;  // this consumer's two staging tiles
  const bool storer = threadIdx.x % 128 == 0;  // the thread of the warpgroup that issues its stores
  int stores = 0;  // 64×64 blocks stored, over this block's tiles: block s is staged in tile s % 2
#endif
  for (int t = blockIdx.x; t < tiles; t += gridDim.x) {
    int z, m0, n0;
    hopper_tile(t, tiles_m, tiles_n, z, m0, n0);
#pragma unroll
    for (int i = 0; i < MW; ++i)
#pragma unroll
      for (int e = 0; e < NACC; ++e) {
#if SCALED
        total[i][e] = 0.0f;
#else
        acc[i][e] = 0.0f;
#endif
      }
#if !A_IN_REGISTERS
    // k-tile `it` into `sums` once it has landed, as one wgmma group: its first step overwrites them unless
    // `accumulate` (scale-d 0: the first k-tile of an 8-bit float promotion interval)
    auto issue_k_tile = [&](float (&sums)[MW][NACC], bool accumulate) {
      const int slot = it % STAGES;
      mbar_wait(&full[slot], it / STAGES & 1);
      wgmma_fence();
#pragma unroll
      for (int kk = 0; kk < K_STEPS; ++kk)
#pragma unroll
        for (int i = 0; i < MW; ++i)
          hopper_step(sums[i], a_desc + slot * A_UNITS + i * 64 * 128 / 16 + kk * A_STEP,
                      b_desc + slot * B_UNITS + kk * B_STEP, kk > 0 || accumulate);
      wgmma_commit();
    };
#endif
#if SCALED
    // `sums` (complete: their group has been waited for) added into the float32 total
    auto promote = [&](float (&sums)[MW][NACC]) {
#pragma unroll
      for (int i = 0; i < MW; ++i) {
        fence_operands(sums[i]);
#pragma unroll
        for (int e = 0; e < NACC; ++e) total[i][e] += sums[i][e];
      }
    };
    int kt = 0;
#if OVERLAP
    // Runs of OVERLAP_RUN intervals, in acc and acc2 in turn. An interval's k-tiles go into `sums` (the first k32
    // step overwriting them); after each k-tile's group is issued the consumer waits only for the group before it,
    // which frees that group's stage and, at an interval's first k-tile, completes the previous interval's sums,
    // `prior`, added into total while this one's MMAs run. Every set a wait frees is known at compile time, and a
    // run ends with nothing in flight (its last promotion waits): ptxas serializes the MMAs where a group stays in
    // flight across the loop's back edge while accumulators are read. The intervals left over run as below.
    auto interval = [&](float (&sums)[MW][NACC], float (&prior)[MW][NACC], bool promote_prior, int run_first) {
#pragma unroll
      for (int p = 0; p < PROMOTE_TILES; ++p, ++it) {
        issue_k_tile(sums, p > 0);
        wgmma_wait<1>();  // the group before this one has completed: its stage is free
        if (it > run_first) mbar_arrive(&empty[(it - 1) % STAGES]);
        if (p == 0 && promote_prior) promote(prior);
      }
    };
    for (; kt + OVERLAP_RUN * PROMOTE_TILES <= k_tiles; kt += OVERLAP_RUN * PROMOTE_TILES) {
      const int run_first = it;
      interval(acc, acc2, false, run_first);
      interval(acc2, acc, true, run_first);
      interval(acc, acc2, true, run_first);
      interval(acc2, acc, true, run_first);
      wgmma_wait<0>();
      mbar_arrive(&empty[(it - 1) % STAGES]);
      promote(acc2);
    }
#endif
    // PROMOTE_TILES k-tiles (unrolled: every wait below is known at compile time) are summed by the tensor cores,
    // the first k32 step overwriting acc (scale-d 0); after the last, acc is complete and added into total.
    for (; kt < k_tiles; kt += PROMOTE_TILES) {
#pragma unroll
      for (int p = 0; p < PROMOTE_TILES; ++p, ++it) {
        const int slot = it % STAGES;
        issue_k_tile(acc, p > 0);
        if (p + 1 < PROMOTE_TILES) {
          wgmma_wait<1>();  // k-tile it - 1's group has completed: its stage is free
          if (p > 0) mbar_arrive(&empty[(it - 1) % STAGES]);
        } else {
          wgmma_wait<0>();
          if (p > 0) mbar_arrive(&empty[(it - 1) % STAGES]);
          mbar_arrive(&empty[slot]);
          promote(acc);
        }
      }
    }
#elif A_IN_REGISTERS
    // A k-tile's steps in groups of RS_STEPS, each group's A registers loaded just before it; two sets taken in
    // turn, since a group holds its set until it completes, at the wait after the next group's issue. A k-tile has
    // an even number of groups, so each set's groups are fixed at compile time and ptxas sees which set a wait
    // frees (it serializes the MMAs where it cannot: with groups of one step it did in some builds; whole k-tiles
    // spilled). The wait after a k-tile's first group frees the stage before it.
    unsigned set0[MW][RS_STEPS][4], set1[MW][RS_STEPS][4];
    auto group = [&](unsigned (&f)[MW][RS_STEPS][4], unsigned (&other)[MW][RS_STEPS][4], const float* stage,
                     u64 b, int kk0) {
#pragma unroll
      for (int i = 0; i < MW; ++i)
#pragma unroll
        for (int kk = 0; kk < RS_STEPS; ++kk)
#pragma unroll
          for (int j = 0; j < 4; ++j)
            f[i][kk][j] = __float_as_uint(stage[a_offsets[j] + i * 64 * BK + (kk0 + kk) * 8 * 32]);
      wgmma_fence();
#pragma unroll
      for (int kk = 0; kk < RS_STEPS; ++kk)
#pragma unroll
        for (int i = 0; i < MW; ++i) wgmma_rs_tf32(acc[i], f[i][kk], b + (kk0 + kk) * B_STEP);
      wgmma_commit();
      wgmma_wait<1>();
      fence_operands(other);
    };
    for (int kt = 0; kt < k_tiles; ++kt, ++it) {
      const int slot = it % STAGES;
      mbar_wait(&full[slot], it / STAGES & 1);
      const float* stage = reinterpret_cast<const float*>(sa + slot * A_STAGE) + wg * WG_ROWS * BK;
      const u64 b = b_desc + slot * B_UNITS;
#pragma unroll
      for (int kk0 = 0; kk0 < K_STEPS; kk0 += 2 * RS_STEPS) {
        group(set0, set1, stage, b, kk0);
        if (kk0 == 0 && kt > 0) mbar_arrive(&empty[(it - 1) % STAGES]);
        group(set1, set0, stage, b, kk0 + RS_STEPS);
      }
    }
    wgmma_wait<0>();
#pragma unroll
    for (int i = 0; i < MW; ++i) fence_operands(acc[i]);
    if (k_tiles > 0) mbar_arrive(&empty[(it - 1) % STAGES]);
#else
    for (int kt = 0; kt < k_tiles; ++kt, ++it) {
      issue_k_tile(acc, true);
      wgmma_wait<1>();  // k-tile it - 1's group has completed: its stage is free
      if (kt > 0) mbar_arrive(&empty[(it - 1) % STAGES]);
    }
    wgmma_wait<0>();
#pragma unroll
    for (int i = 0; i < MW; ++i) fence_operands(acc[i]);
    if (k_tiles > 0) mbar_arrive(&empty[(it - 1) % STAGES]);
#endif

#if TMA_STORE
    // Row r of a staging tile is one 128-byte line, its 16-byte chunk q stored at q ^ (r % 8): a thread's n8 tile j
    // of the block is chunk j of rows r and r + 8 (r % 8 = lane / 4), and the 32 lanes of a store hit 32 banks.
    const int r = warp * 16 + lane / 4;
#pragma unroll
    for (int i = 0; i < MW; ++i)
#pragma unroll
      for (int cb = 0; cb < BN / 64; ++cb, ++stores) {
        T* tile = staging + stores % 2 * 64 * 64;
        if (storer) bulk_wait_read<1>();  // the store issued from this tile two blocks ago has read it
        named_barrier(1 + wg, 128);
#pragma unroll
        for (int j = 0; j < 8; ++j) {
#if SCALED
          float d[4] = {total[i][4 * (cb * 8 + j)], total[i][4 * (cb * 8 + j) + 1], total[i][4 * (cb * 8 + j) + 2],
                        total[i][4 * (cb * 8 + j) + 3]};
          const int row = m0 + wg * WG_ROWS + i * 64 + r, col = n0 + cb * 64 + j * 8 + lane % 4 * 2;
          scaled_pair(d[0], d[1], row, col, M, N, scale_a, scale_b, bias);
          scaled_pair(d[2], d[3], row + 8, col, M, N, scale_a, scale_b, bias);
#else
          const float* d = acc[i] + 4 * (cb * 8 + j);
#endif
          T* at = tile + r * 64 + (j ^ lane / 4) * 8 + lane % 4 * 2;
          *reinterpret_cast<unsigned*>(at) = pack_pair(d[0], d[1], T{});
          *reinterpret_cast<unsigned*>(at + 8 * 64) = pack_pair(d[2], d[3], T{});
        }
        fence_proxy_async();  // each thread's stores, for the TMA unit's reads
        named_barrier(1 + wg, 128);
        if (storer) {
          tma_store_3d(&c_map, tile, n0 + cb * 64, m0 + wg * WG_ROWS + i * 64, z);
          bulk_commit();
        }
      }
#else
    T* cz = c + (i64)z * M * N;
#if A_IN_REGISTERS  // the rows the fragments were loaded from (the file's header)
    constexpr int HALF = 4;
    const int row = m0 + wg * WG_ROWS + warp / 2 * 32 + warp % 2 * 8 + lane / 4 % 4 + lane / 16 * 16;
#else
    constexpr int HALF = 8;  // an m16 fragment's second rows
    const int row = m0 + wg * WG_ROWS + warp * 16 + lane / 4;
#endif
    const int col = n0 + lane % 4 * 2;
#pragma unroll
    for (int i = 0; i < MW; ++i)
#pragma unroll
      for (int j = 0; j < BN / 8; ++j) {
#if SCALED
        float d[4] = {total[i][4 * j], total[i][4 * j + 1], total[i][4 * j + 2], total[i][4 * j + 3]};
        scaled_pair(d[0], d[1], row + i * 64, col + j * 8, M, N, scale_a, scale_b, bias);
        scaled_pair(d[2], d[3], row + i * 64 + HALF, col + j * 8, M, N, scale_a, scale_b, bias);
#else
        const float* d = acc[i] + 4 * j;
#endif
        hopper_store(cz, M, N, row + i * 64, col + j * 8, d[0], d[1]);
        hopper_store(cz, M, N, row + i * 64 + HALF, col + j * 8, d[2], d[3]);
      }
#endif
  }
#if TMA_STORE
  if (storer) bulk_wait<0>();  // the stores have read their staging tiles (and written C) before the block exits
#endif
}

#if TF32
// dst[z][n][k] = src[z][k][n]: a float32 B (K×N, any strides, in elements) copied into the K-major rows the TF32
// kernel reads (rows `pitch` elements apart, batches N·pitch). A 32×32 block through shared memory (a column of
// padding: the transposed reads hit 32 banks), so that the reads run along src's rows and the writes along dst's.
// Grid (⌈N/32⌉, ⌈K/32⌉, batch), block (32, 8).
extern "C" __global__ void __launch_bounds__(256)
    k_major_copy(const float* __restrict__ src, float* __restrict__ dst, int K, int N, i64 stride_z, i64 stride_k,
                 i64 stride_n, i64 pitch) {
  __shared__ float block[32][33];
  const int n0 = blockIdx.x * 32, k0 = blockIdx.y * 32, z = blockIdx.z;
  src += z * stride_z;
  dst += (i64)z * N * pitch;
#pragma unroll
  for (int r = threadIdx.y; r < 32; r += 8) {
    const int k = k0 + r, n = n0 + threadIdx.x;
    if (k < K && n < N) block[r][threadIdx.x] = src[k * stride_k + n * stride_n];
  }
  __syncthreads();
#pragma unroll
  for (int r = threadIdx.y; r < 32; r += 8) {
    const int n = n0 + r, k = k0 + threadIdx.x;
    if (n < N && k < K) dst[n * pitch + k] = block[threadIdx.x][r];
  }
}
#endif
