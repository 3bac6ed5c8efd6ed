// sm_90 mbarriers and bulk copies (the TMA unit's one-dimensional form, no tensor map): a thread issues one
// copy of up to a megabyte from global to shared memory, and the mbarrier's phase completes when its bytes
// have landed. Used by layer_norm's streaming kernel. (attention's wgmma.cuh keeps its own mbarrier helpers,
// which its shipped tuning records hash.)
#ifndef KZ_MBARRIER_CUH
#define KZ_MBARRIER_CUH
#if __CUDA_ARCH__ >= 900

__device__ __forceinline__ unsigned shared_address(const void* p) {
  return (unsigned)__cvta_generic_to_shared(p);
}

// An mbarrier whose phase takes `count` arrivals; then visible to the async proxy (the bulk copies).
__device__ __forceinline__ void mbarrier_init(unsigned long long* bar, int count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(shared_address(bar)), "r"(count) : "memory");
  asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
}

// Wait until the phase of the given parity (0 for the first, then 1, 0, ...) has completed.
__device__ __forceinline__ void mbarrier_wait(unsigned long long* bar, int parity) {
  unsigned done = 0;
  while (!done)
    asm volatile("{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\nselp.u32 %0, 1, 0, p;\n}"
                 : "=r"(done) : "r"(shared_address(bar)), "r"(parity) : "memory");
}

// One thread: arrive on `bar`, expecting `bytes`, and copy them from global `src` to shared `dst` (both 16-byte
// aligned, bytes a multiple of 16); the phase completes when they have landed. The shared memory it overwrites
// must be done with: the caller's block barrier orders the other threads' reads before it, and the proxy fence
// orders them (generic proxy) before the copy's writes (async proxy).
__device__ __forceinline__ void bulk_load(void* dst, const void* src, unsigned bytes, unsigned long long* bar) {
  asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(shared_address(bar)), "r"(bytes)
               : "memory");
  asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];"
               ::"r"(shared_address(dst)), "l"(src), "r"(bytes), "r"(shared_address(bar)) : "memory");
}

#endif
#endif
