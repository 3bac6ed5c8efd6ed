// PTX wrappers of the tensor-core kernels (the GEMM core plugins/_gemm/gemm.cuh and the flash-attention
// kernels plugins/_cuda/flash.cuh): cp.async, ldmatrix, mma.sync m16n8k16 for kz_half / kz_bf16, the packing
// of two floats into one 16-bit pair register, ex2.approx. Every inline asm of those kernels is here.
//
// mma.sync.m16n8k16 fragments, lane l = 4g + t (g = l/4 the group, t = l%4 the thread in it); a register
// of A or B holds two 16-bit elements, the lower-indexed one in its low half:
//   A (16×16, row-major)  a0: (row g,   cols 2t, 2t+1)   a1: (row g+8, cols 2t, 2t+1)
//                         a2: (row g,   cols 2t+8, +9)   a3: (row g+8, cols 2t+8, +9)
//   B (16×8, k × n)       b0: (k 2t, 2t+1, col g)        b1: (k 2t+8, 2t+9, col g)
//   C, D (16×8, float32)  c0, c1: (row g, cols 2t, 2t+1)   c2, c3: (row g+8, cols 2t, 2t+1)
// ldmatrix.x4 loads four 8×8 matrices of 16-bit elements: lanes 8q .. 8q+7 give the addresses of rows 0-7 of
// matrix q (16 contiguous bytes each), and lane l receives in r[q] row g, columns 2t and 2t+1 of matrix q;
// with .trans it receives column g, rows 2t and 2t+1 (the matrix transposed).

__device__ __forceinline__ unsigned smem_addr(const void* p) { return (unsigned)__cvta_generic_to_shared(p); }

// 16 bytes global -> shared, bypassing L1; src_bytes 0 writes 16 zero bytes and reads nothing.
__device__ __forceinline__ void cp_async16(void* dst, const void* src, int src_bytes) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_addr(dst)), "l"(src), "r"(src_bytes));
}
// 4 bytes global -> shared; src_bytes 0 writes a zero.
__device__ __forceinline__ void cp_async4(void* dst, const void* src, int src_bytes) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(smem_addr(dst)), "l"(src), "r"(src_bytes));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
template <int N>
__device__ __forceinline__ void cp_async_wait() { asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory"); }

// D += A·B on one m16n8k16 tile, float32 accumulators; the last argument picks the element type.
__device__ __forceinline__ void mma_16816(float* d, const unsigned* a, const unsigned* b, kz_half) {
  asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
               "{%0,%1,%2,%3};\n"
               : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}
__device__ __forceinline__ void mma_16816(float* d, const unsigned* a, const unsigned* b, kz_bf16) {
  asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
               "{%0,%1,%2,%3};\n"
               : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

__device__ __forceinline__ void ldmatrix_x4(unsigned* r, const void* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(smem_addr(p)));
}
__device__ __forceinline__ void ldmatrix_x4_trans(unsigned* r, const void* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(smem_addr(p)));
}

// (lo, hi) rounded to nearest even into one register, lo in the low half: an A-fragment register, or two
// adjacent outputs. cvt's first source goes to the upper half.
__device__ __forceinline__ unsigned pack_pair(float lo, float hi, kz_half) {
  unsigned r;
  asm("cvt.rn.f16x2.f32 %0, %1, %2;\n" : "=r"(r) : "f"(hi), "f"(lo));
  return r;
}
__device__ __forceinline__ unsigned pack_pair(float lo, float hi, kz_bf16) {
  unsigned r;
  asm("cvt.rn.bf16x2.f32 %0, %1, %2;\n" : "=r"(r) : "f"(hi), "f"(lo));
  return r;
}

// 2^x by the SFU (relative error ~2^-22; -inf gives +0, NaN stays NaN).
__device__ __forceinline__ float ex2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}
