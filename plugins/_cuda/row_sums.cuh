// Sums over the threads that share a row, for the row kernels of layer_norm and layer_norm_backward: a warp
// (shuffles), a block (shuffles, then shared memory), or, on sm_90, a cluster of blocks (each block's sum,
// then distributed shared memory). Every sum is returned to every thread that takes part, in a fixed order
// of additions, so all of them hold the same float. CLUSTER (the cluster's blocks) is a compile-time define, and
// PREFETCH (layer_norm's prefetch of the next row) one with a default here.
#ifndef PREFETCH
#define PREFETCH 0
#endif

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

// Sums of (a, b) over the block, returned to every thread. red: 33 float2 of shared memory. Calls may
// follow each other without a barrier between: a call writes red[32] only after its first barrier,
// which every thread reaches after reading the previous red[32].
__device__ __forceinline__ float2 block_sum2(float a, float b, float2* red) {
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  a = warp_sum(a);
  b = warp_sum(b);
  if (lane == 0) red[warp] = make_float2(a, b);
  __syncthreads();
  if (warp == 0) {
    const float2 w = lane < (int)(blockDim.x >> 5) ? red[lane] : make_float2(0.0f, 0.0f);
    const float sa = warp_sum(w.x), sb = warp_sum(w.y);
    if (lane == 0) red[32] = make_float2(sa, sb);
  }
  __syncthreads();
  return red[32];
}

#if __CUDA_ARCH__ >= 900
#ifndef CLUSTER
#define CLUSTER 8
#endif

__device__ __forceinline__ unsigned cluster_rank() {
  unsigned r;
  asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(r));
  return r;
}

// Reached by every thread of every block of the cluster; shared-memory writes before it are seen by every
// block after it.
__device__ __forceinline__ void cluster_barrier() {
  asm volatile("barrier.cluster.arrive.release.aligned;\n\tbarrier.cluster.wait.acquire.aligned;" ::: "memory");
}

// The two halves of cluster_barrier(): a block that has read what it needs of the others' shared memory
// arrives, goes on with its own work, and waits before it exits (or writes what the others may still read).
__device__ __forceinline__ void cluster_arrive() {
  asm volatile("barrier.cluster.arrive.release.aligned;" ::: "memory");
}

__device__ __forceinline__ void cluster_wait() {
  asm volatile("barrier.cluster.wait.acquire.aligned;" ::: "memory");
}

// *p in the shared memory of the cluster's block `rank` (p: an address in this block's shared memory).
__device__ __forceinline__ float2 load_cluster(const float2* p, unsigned rank) {
  const unsigned local = (unsigned)__cvta_generic_to_shared(p);
  unsigned remote;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(remote) : "r"(local), "r"(rank));
  float2 v;
  asm volatile("ld.shared::cluster.v2.f32 {%0, %1}, [%2];" : "=f"(v.x), "=f"(v.y) : "r"(remote) : "memory");
  return v;
}

// Lane r < CLUSTER of the calling warp: block r's float2 at `slot` (an address in this block's shared
// memory); the other lanes: zeros. One remote load a lane, all in flight together, where a loop of
// load_cluster in every thread issues THREADS * CLUSTER loads from other SMs.
__device__ __forceinline__ float2 gather_cluster(const float2* slot) {
  const unsigned lane = threadIdx.x & 31;
  return lane < CLUSTER ? load_cluster(slot, lane) : make_float2(0.0f, 0.0f);
}

// The float2 at p (an address in this block's shared memory) in each of the cluster's first N blocks, added in
// rank order from 0: the same float in every block that asks.
template <int N>
__device__ __forceinline__ float2 sum_over_cluster(const float2* p) {
  float2 s = make_float2(0.0f, 0.0f);
#pragma unroll
  for (unsigned r = 0; r < N; ++r) {
    const float2 v = load_cluster(p, r);
    s.x += v.x;
    s.y += v.y;
  }
  return s;
}

// Sums of (a, b) over the cluster's blocks: each block's block_sum2, added in rank order. slot: 2 float2 of
// shared memory taken in turn (phase, starting at 0): a block writes slot[phase] again two calls later,
// after the barrier of the call between, which no block passes before it has read this call's slots.
// A kernel ends with cluster_barrier(), so that no block exits while another may still read its slots.
__device__ __forceinline__ float2 cluster_sum2(float a, float b, float2* red, float2* slot, int& phase) {
  const float2 mine = block_sum2(a, b, red);
  if (threadIdx.x == 0) slot[phase] = mine;
  cluster_barrier();
  const float2 s = sum_over_cluster<CLUSTER>(slot + phase);
  phase ^= 1;
  return s;
}
#endif
