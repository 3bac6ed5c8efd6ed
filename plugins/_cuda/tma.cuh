// The asynchronous machinery of Hopper's (sm_90) producer/consumer pipelines, shared by the attention kernels
// and the GEMM: mbarriers, TMA tensor copies (cp.async.bulk.tensor) and bulk reductions, and the helpers of warp
// specialization (setmaxnreg, named barriers). Needs smem_addr (tensor_core.cuh). The guard lets a source reach it
// both directly and through wgmma.cuh.
#ifndef KZ_TMA_CUH
#define KZ_TMA_CUH

typedef unsigned long long u64;

// Makes this thread's mbarrier inits visible to the async proxy (the TMA unit's complete_tx) and the other
// threads, once, after the inits and before the barrier that publishes them.
__device__ __forceinline__ void fence_mbarrier_init() {
  asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
}

// mbarriers in shared memory (the producer pipelines of the attention forward and the GEMM): init with the
// arrivals a phase takes; arrive; arrive when this thread's cp.async copies issued so far land (noinc: the init
// count holds it); wait until the phase of the given parity has completed.
__device__ __forceinline__ void mbar_init(u64* bar, int count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(smem_addr(bar)), "r"(count) : "memory");
}
__device__ __forceinline__ void mbar_arrive(u64* bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(smem_addr(bar)) : "memory");
}
__device__ __forceinline__ void mbar_arrive_on_copies(u64* bar) {
  asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];\n" ::"r"(smem_addr(bar)) : "memory");
}
__device__ __forceinline__ void mbar_wait(u64* bar, int parity) {
  unsigned done = 0;
  while (!done)
    asm volatile("{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\nselp.u32 %0, 1, 0, p;\n}\n"
                 : "=r"(done) : "r"(smem_addr(bar)), "r"(parity) : "memory");
}
// Arrive on bar and add `bytes` to the transaction count its phase waits for (the bytes of the tensor copies
// that complete_tx on it).
__device__ __forceinline__ void mbar_arrive_expect(u64* bar, unsigned bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(smem_addr(bar)), "r"(bytes)
               : "memory");
}

// Bulk reductions by the TMA unit: dst[i] += src[i] for bytes / 4 floats, dst in global and src in shared memory
// (16-byte aligned, bytes a multiple of 16), issued into this thread's bulk async-group; bulk_commit closes the
// group; bulk_wait_read<N> waits until at most N of this thread's groups still read their shared memory,
// bulk_wait<N> until at most N are incomplete.
__device__ __forceinline__ void bulk_reduce_add(float* dst, const float* src, unsigned bytes) {
  asm volatile("cp.reduce.async.bulk.global.shared::cta.bulk_group.add.f32 [%0], [%1], %2;\n"
               ::"l"(dst), "r"(smem_addr(src)), "r"(bytes) : "memory");
}
__device__ __forceinline__ void bulk_commit() { asm volatile("cp.async.bulk.commit_group;\n" ::: "memory"); }
template <int N>
__device__ __forceinline__ void bulk_wait_read() {
  asm volatile("cp.async.bulk.wait_group.read %0;\n" ::"n"(N) : "memory");
}
template <int N>
__device__ __forceinline__ void bulk_wait() { asm volatile("cp.async.bulk.wait_group %0;\n" ::"n"(N) : "memory"); }

// A CUtensorMap (the driver's cuTensorMapEncodeTiled fills it on the host; a kernel takes it by value as a
// __grid_constant__ parameter): 128 opaque bytes, 64-byte aligned.
struct __align__(64) TensorMap {
  u64 opaque[16];
};

// The box at coordinates (c0, c1, c2, c3) (innermost first, in elements) of the 4-d tensor `map` describes,
// copied by the TMA unit into shared memory at dst (laid out and swizzled as the map says; 1024-byte aligned for
// the 128-byte swizzle), completing its bytes on bar. Elements outside the tensor arrive as zeros.
__device__ __forceinline__ void tma_load_4d(void* dst, const TensorMap* map, int c0, int c1, int c2, int c3,
                                            u64* bar) {
  asm volatile("cp.async.bulk.tensor.4d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3, "
               "%4, %5}], [%6];\n"
               ::"r"(smem_addr(dst)), "l"(reinterpret_cast<u64>(map)), "r"(c0), "r"(c1), "r"(c2), "r"(c3),
               "r"(smem_addr(bar)) : "memory");
}

// As tma_load_4d for a 3-d map (the GEMM's operands: column, row, batch).
__device__ __forceinline__ void tma_load_3d(void* dst, const TensorMap* map, int c0, int c1, int c2, u64* bar) {
  asm volatile("cp.async.bulk.tensor.3d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3, "
               "%4}], [%5];\n"
               ::"r"(smem_addr(dst)), "l"(reinterpret_cast<u64>(map)), "r"(c0), "r"(c1), "r"(c2), "r"(smem_addr(bar))
               : "memory");
}

// The box at coordinates (c0, c1, c2) of the 3-d tensor `map` describes written from shared memory at src (laid out
// and swizzled as the map says) by the TMA unit, into this thread's bulk async-group (bulk_commit, bulk_wait*
// above); elements of the box outside the tensor are not written. src's writes by the generic proxy must be made
// visible to the async proxy first (fence_proxy_async, wgmma.cuh) by every thread that wrote them.
__device__ __forceinline__ void tma_store_3d(const TensorMap* map, const void* src, int c0, int c1, int c2) {
  asm volatile("cp.async.bulk.tensor.3d.global.shared::cta.bulk_group [%0, {%2, %3, %4}], [%1];\n"
               ::"l"(reinterpret_cast<u64>(map)), "r"(smem_addr(src)), "r"(c0), "r"(c1), "r"(c2) : "memory");
}

// The registers of this thread's warpgroup (every thread of it executes the same) lowered or raised to N (24-256,
// a multiple of 8); raising waits until the register file has them. The kernel's register count at entry must be
// known to ptxas (__launch_bounds__ with a minimum of blocks), else it ignores these (C7508).
template <int N>
__device__ __forceinline__ void setmaxnreg_dec() { asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(N)); }
template <int N>
__device__ __forceinline__ void setmaxnreg_inc() { asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(N)); }

// A barrier of `threads` threads (a multiple of 32) on hardware barrier `id` (1-15; 0 is __syncthreads').
__device__ __forceinline__ void named_barrier(int id, int threads) {
  asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}

#endif  // KZ_TMA_CUH
