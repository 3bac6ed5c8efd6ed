// Hopper's warpgroup MMA (wgmma, sm_90a) for the flash-attention kernels and the GEMM: the cp.async loads into
// 128-byte-swizzled tiles and their shared-memory matrix descriptors, the fences, and D (+)= A·B on one m64nNk16
// step for N = 32, 64, 128, 256 with float32 accumulators, A from shared memory (ss) or from registers (rs), B
// from shared memory, the 8-bit float m64nNk32 and TF32 m64nNk8 steps (ss), and the products the attention
// kernels chain from those steps.
//
// A warpgroup (4 consecutive warps, 128 threads) issues each wgmma together; warp w of it owns rows 16w .. 16w+15
// of the m64 tile, and its fragments are those of mma.sync m16n8k16 (tensor_core.cuh): the accumulators of n8
// tile j are d[4j .. 4j+3] (rows g, g+8; columns 8j + 2t, +1), and the A registers of an rs step are an m16n8k16
// A fragment. So the online softmax, masking and epilogue of the mma.sync kernels work on them unchanged.
//
// Tiles: [HEAD_DIM / 64][rows][64] elements (64 columns of 16-bit elements = one 128-byte line a row), each
// column block 1024-byte aligned, the 16-byte chunk c of row r stored at chunk c ^ (r % 8) (the 128-byte
// swizzle; the descriptor's layout type 1 undoes it). One descriptor describes
//   K-major (A, and B = Kᵀ: rows are M or N, the k16 step's 32 bytes along a line): 8-row groups 1024 bytes
//     apart (stride byte offset); the leading byte offset is unused. Step kk of the head dim starts at column
//     block kk / 4, byte 32·(kk % 4) of the line.
//   MN-major (B = V, rows are k, N along the lines; imm-trans-b 1): k rows 8 at a time 1024 bytes apart
//     (stride byte offset), N's 64-column blocks `rows`·128 bytes apart (leading byte offset). Step c of the
//     keys starts at row 16c.
// Accumulators and rs A registers are held by the wgmma until wgmma_wait; fence_operands after the wait keeps
// the compiler from reading them (or writing them) across it.

// u64, mbarriers, TMA copies and the warp-specialization helpers the pipelines around these products use
#include "tma.cuh"

// A descriptor of a 128-byte-swizzled tile at p (shared memory); byte offsets as above.
__device__ __forceinline__ u64 sw128_desc(const void* p, unsigned leading_bytes) {
  const unsigned addr = smem_addr(p);
  return (u64)((addr & 0x3FFFF) >> 4) | (u64)(leading_bytes >> 4) << 16 | (u64)(1024 >> 4) << 32 | 1ull << 62;
}

__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
template <int N>
__device__ __forceinline__ void wgmma_wait() { asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory"); }
// Writes of the generic proxy (st.shared, cp.async) made visible to the async proxy that wgmma reads through.
__device__ __forceinline__ void fence_proxy_async() { asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); }

template <int N>
__device__ __forceinline__ void fence_operands(float (&d)[N]) {
#pragma unroll
  for (int i = 0; i < N; ++i) asm volatile("" : "+f"(d[i])::"memory");
}
template <int A, int B, int C>
__device__ __forceinline__ void fence_operands(unsigned (&a)[A][B][C]) {
#pragma unroll
  for (int i = 0; i < A * B * C; ++i) asm volatile("" : "+r"(a[i / (B * C)][i / C % B][i % C])::"memory");
}

// The accumulators as asm operands (8 at a time) and as the register list of the instruction.
#define KZ_ACC8(d, i) "+f"(d[i]), "+f"(d[i + 1]), "+f"(d[i + 2]), "+f"(d[i + 3]), "+f"(d[i + 4]), "+f"(d[i + 5]), \
    "+f"(d[i + 6]), "+f"(d[i + 7])
#define KZ_ACC16(d) KZ_ACC8(d, 0), KZ_ACC8(d, 8)
#define KZ_ACC32(d) KZ_ACC16(d), KZ_ACC8(d, 16), KZ_ACC8(d, 24)
#define KZ_ACC64(d) KZ_ACC32(d), KZ_ACC8(d, 32), KZ_ACC8(d, 40), KZ_ACC8(d, 48), KZ_ACC8(d, 56)
#define KZ_ACC128(d) KZ_ACC64(d), KZ_ACC8(d, 64), KZ_ACC8(d, 72), KZ_ACC8(d, 80), KZ_ACC8(d, 88), KZ_ACC8(d, 96), \
    KZ_ACC8(d, 104), KZ_ACC8(d, 112), KZ_ACC8(d, 120)
#define KZ_REGS16 "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15}"
#define KZ_REGS32 "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, " \
    "%21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}"
#define KZ_REGS64 "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, " \
    "%21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, " \
    "%41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, " \
    "%61, %62, %63}"
#define KZ_REGS128 "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, " \
    "%20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, " \
    "%41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, " \
    "%62, %63, %64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, %80, %81, %82, " \
    "%83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, %96, %97, %98, %99, %100, %101, %102, %103, " \
    "%104, %105, %106, %107, %108, %109, %110, %111, %112, %113, %114, %115, %116, %117, %118, %119, %120, %121, " \
    "%122, %123, %124, %125, %126, %127}"

// d (+)= A·B on one m64nNk16 step (H = N/2 accumulators a thread; O0 .. O5 the operand numbers H .. H+5 as text).
// wgmma_ss: A and B by descriptor, K-major unless TRANS_A / TRANS_B (imm-trans-a, imm-trans-b: MN-major, as
// above); accumulate 0 overwrites d (a product's first step). wgmma_rs: A from registers (a warp's m16n8k16 A
// fragment), B MN-major (imm-trans-b 1), always accumulating.
#define KZ_WGMMA(N, H, TY, TAG, O0, O1, O2, O3, O4, O5)                                                         \
  template <int TRANS_A = 0, int TRANS_B = 0>                                                                    \
  __device__ __forceinline__ void wgmma_ss(float (&d)[H], u64 a, u64 b, int accumulate, TAG) {                 \
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %" O2 ", 0;\n"                                              \
                 "wgmma.mma_async.sync.aligned.m64n" #N "k16.f32." TY "." TY " " KZ_REGS##H ", %" O0 ", %" O1  \
                 ", p, 1, 1, %" O3 ", %" O4 ";\n}\n"                                                            \
                 : KZ_ACC##H(d) : "l"(a), "l"(b), "r"(accumulate), "n"(TRANS_A), "n"(TRANS_B));                 \
  }                                                                                                              \
  __device__ __forceinline__ void wgmma_rs(float (&d)[H], const unsigned (&a)[4], u64 b, TAG) {                \
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %" O5 ", 0;\n"                                              \
                 "wgmma.mma_async.sync.aligned.m64n" #N "k16.f32." TY "." TY " " KZ_REGS##H ", {%" O0 ", %" O1 \
                 ", %" O2 ", %" O3 "}, %" O4 ", p, 1, 1, 1;\n}\n"                                                \
                 : KZ_ACC##H(d) : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "r"(1));                  \
  }

KZ_WGMMA(32, 16, "f16", kz_half, "16", "17", "18", "19", "20", "21")
KZ_WGMMA(32, 16, "bf16", kz_bf16, "16", "17", "18", "19", "20", "21")
KZ_WGMMA(64, 32, "f16", kz_half, "32", "33", "34", "35", "36", "37")
KZ_WGMMA(64, 32, "bf16", kz_bf16, "32", "33", "34", "35", "36", "37")
KZ_WGMMA(128, 64, "f16", kz_half, "64", "65", "66", "67", "68", "69")
KZ_WGMMA(128, 64, "bf16", kz_bf16, "64", "65", "66", "67", "68", "69")
KZ_WGMMA(256, 128, "f16", kz_half, "128", "129", "130", "131", "132", "133")
KZ_WGMMA(256, 128, "bf16", kz_bf16, "128", "129", "130", "131", "132", "133")
#undef KZ_WGMMA

// 8-bit floats (scaled_matmul, attention's FP8 forward): tag types of e4m3 and e5m2 elements (the host's names for
// them: plugins/_cuda/__init__.py), and d (+)= A·B on one m64nNk32 step, A and B K-major by descriptor (the 8-bit
// float wgmma has no transpose), of either kind each; accumulate 0 overwrites d.
struct kz_e4m3 { unsigned char x; };
struct kz_e5m2 { unsigned char x; };
#define KZ_WGMMA_F8(N, H, TA, TB, TAG_A, TAG_B, O0, O1, O2)                                                      \
  __device__ __forceinline__ void wgmma_ss_f8(float (&d)[H], u64 a, u64 b, int accumulate, TAG_A, TAG_B) {     \
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %" O2 ", 0;\n"                                               \
                 "wgmma.mma_async.sync.aligned.m64n" #N "k32.f32." TA "." TB " " KZ_REGS##H ", %" O0 ", %" O1   \
                 ", p, 1, 1;\n}\n"                                                                             \
                 : KZ_ACC##H(d) : "l"(a), "l"(b), "r"(accumulate));                                             \
  }
#define KZ_WGMMA_F8_TYPES(N, H, O0, O1, O2)                              \
  KZ_WGMMA_F8(N, H, "e4m3", "e4m3", kz_e4m3, kz_e4m3, O0, O1, O2)       \
  KZ_WGMMA_F8(N, H, "e4m3", "e5m2", kz_e4m3, kz_e5m2, O0, O1, O2)       \
  KZ_WGMMA_F8(N, H, "e5m2", "e4m3", kz_e5m2, kz_e4m3, O0, O1, O2)       \
  KZ_WGMMA_F8(N, H, "e5m2", "e5m2", kz_e5m2, kz_e5m2, O0, O1, O2)
KZ_WGMMA_F8_TYPES(32, 16, "16", "17", "18")
KZ_WGMMA_F8_TYPES(64, 32, "32", "33", "34")
KZ_WGMMA_F8_TYPES(128, 64, "64", "65", "66")
KZ_WGMMA_F8_TYPES(256, 128, "128", "129", "130")
#undef KZ_WGMMA_F8_TYPES
#undef KZ_WGMMA_F8

// TF32 (matmul's float32 when torch allows TF32): d (+)= A·B on one m64nNk8 step, float32 operands read as TF32
// (their low 13 mantissa bits ignored). wgmma_ss_tf32: A and B K-major by descriptor (the TF32 wgmma has no
// transpose); accumulate 0 overwrites d. wgmma_rs_tf32: A from registers, in any layout the threads loaded it from
// (a warp's m16n8k8 A fragment: rows g, g + 8 and columns t, t + 4 of its m16 rows), B K-major by descriptor,
// always accumulating.
#define KZ_WGMMA_TF32(N, H, O0, O1, O2, O3, O4, O5)                                                      \
  __device__ __forceinline__ void wgmma_ss_tf32(float (&d)[H], u64 a, u64 b, int accumulate) {                  \
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %" O2 ", 0;\n"                                               \
                 "wgmma.mma_async.sync.aligned.m64n" #N "k8.f32.tf32.tf32 " KZ_REGS##H ", %" O0 ", %" O1          \
                 ", p, 1, 1;\n}\n"                                                                             \
                 : KZ_ACC##H(d) : "l"(a), "l"(b), "r"(accumulate));                                             \
  }                                                                                                              \
  __device__ __forceinline__ void wgmma_rs_tf32(float (&d)[H], const unsigned (&a)[4], u64 b) {                \
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %" O5 ", 0;\n"                                               \
                 "wgmma.mma_async.sync.aligned.m64n" #N "k8.f32.tf32.tf32 " KZ_REGS##H ", {%" O0 ", %" O1        \
                 ", %" O2 ", %" O3 "}, %" O4 ", p, 1, 1;\n}\n"                                                  \
                 : KZ_ACC##H(d) : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "r"(1));                  \
  }
KZ_WGMMA_TF32(64, 32, "32", "33", "34", "35", "36", "37")
KZ_WGMMA_TF32(128, 64, "64", "65", "66", "67", "68", "69")
KZ_WGMMA_TF32(256, 128, "128", "129", "130", "131", "132", "133")
#undef KZ_WGMMA_TF32

// acc (=) A·Bᵀ over the head dim: HEAD_DIM/16 ss steps, A and B K-major swizzled tiles by descriptor whose
// 64-column blocks are a_block and b_block 16-byte units apart; step kk reads 32 bytes along the lines of block
// kk / 4, and the first overwrites acc.
template <int H>
__device__ __forceinline__ void wgmma_over_head_dim(float (&acc)[H], u64 a, int a_block, u64 b, int b_block) {
#pragma unroll
  for (int kk = 0; kk < KD; ++kk) {
    const int step = kk % 4 * 2;
    wgmma_ss(acc, a + kk / 4 * a_block + step, b + kk / 4 * b_block + step, kk > 0, T{});
  }
}

// acc += A·B over 16·C rows of B: C rs steps, A packed in registers (pack_p: C k16 steps of a warp's A
// fragments), B by an MN-major descriptor, step c at lines 16c.. of every column block.
template <int H, int C>
__device__ __forceinline__ void wgmma_over_rows(float (&acc)[H], const unsigned (&a)[1][C][4], u64 b) {
#pragma unroll
  for (int c = 0; c < C; ++c) wgmma_rs(acc, a[0][c], b + c * 16 * 128 / 16, T{});
}

// Rows row0 .. row0+ROWS-1 of a matrix (as flash.cuh's load_rows) into rows 0.. of the 128-byte-swizzled tile
// s [CB][LINES][64] (LINES rows a column block), by NTHREADS threads, this one `tid`: chunk c of row r goes to
// column block c / 8, chunk (c % 8) ^ (r % 8) of its line. A thread keeps one chunk column; its rows are
// NTHREADS / CHUNKS apart. CHUNKS: 16-byte chunks a row, ROW_CHUNKS where given (the 8-bit q and k rows of an FP8
// forward are half as many), else CPR.
template <int ROWS, int LINES, int NTHREADS, int ROW_CHUNKS = 0>
__device__ __forceinline__ void load_rows_sw(T* s, const T* g, i64 stride, int row0, int n_rows, int d, int tid) {
  constexpr int CHUNKS = ROW_CHUNKS ? ROW_CHUNKS : CPR;
  constexpr int STEP = NTHREADS / CHUNKS;
  static_assert(NTHREADS % CHUNKS == 0, "a pass of the threads covers whole rows");
  const int r = tid / CHUNKS, c = tid % CHUNKS, col = c * 8;
  const int rows = col < d ? n_rows - row0 - r : 0;
  T* dst = s + c / 8 * LINES * 64 + r * 64;
  const T* src = g + (row0 + r) * stride + col;
#pragma unroll
  for (int i = 0; i < (ROWS + STEP - 1) / STEP; ++i, src += STEP * stride) {
    const int row = r + i * STEP;  // row & 7 folds to r & 7 when STEP is a multiple of 8
    if (ROWS % STEP == 0 || row < ROWS)
      cp_async16(dst + i * STEP * 64 + ((c & 7) ^ (row & 7)) * 8, src, i * STEP < rows ? 16 : 0);
  }
}
