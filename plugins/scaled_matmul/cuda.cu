// scaled_matmul on Hopper (sm_90, compiled for sm_90a): matmul's warp-specialized TMA + wgmma kernel
// (../_gemm/hopper.cuh) with SCALED 1: 8-bit float operands, A (M×K) row-major and B read through Bᵀ (N×K)
// row-major, both K-major; the tensor cores' sums promoted into float32 every PROMOTE_K of K; the epilogue applies
// the scales (SCALE_ROWS: row-wise), the bias (BIAS) and the conversion to T, the output's type.
// Defines: T, A_F8 and B_F8 (kz_e4m3 or kz_e5m2), BM, BN, STAGES, CONSUMERS, TMA_STORE, PROMOTE_K, SCALE_ROWS, BIAS.
#define SCALED 1
#define BK 128
#define B_COL_MAJOR 1
#ifndef BM
#define BM 128
#endif
#ifndef BN
#define BN 128
#endif
#ifndef STAGES
#define STAGES 6
#endif
#ifndef PROMOTE_K
#define PROMOTE_K 128
#endif
#ifndef SCALE_ROWS
#define SCALE_ROWS 0
#endif
#ifndef BIAS
#define BIAS 0
#endif
#ifndef A_F8
#define A_F8 kz_e4m3
#endif
#ifndef B_F8
#define B_F8 kz_e4m3
#endif

// smem_addr and pack_pair
#include "../_cuda/tensor_core.cuh"
#include "../_gemm/hopper.cuh"
