// The row kernels' 16-byte loads and stores (softmax, cross_entropy, layer_norm and their backwards): PACK
// elements of T per access, at most ITEMS (which the includer defines first). load_pack fills the slots past a
// row's end with the caller's neutral value (-inf for a max, 0 for a sum).
#ifndef KZ_ROW_PACKS_CUH
#define KZ_ROW_PACKS_CUH

constexpr int PACK = 16 / (int)sizeof(T) < ITEMS ? 16 / (int)sizeof(T) : ITEMS;
static_assert(ITEMS % PACK == 0, "ITEMS must be a power of two");

// Pack<V>: V elements of T as one access
#include "pack.cuh"

// v[0..V) = p[i..i+V) as float, or `fill` when i >= end (V divides end - i when V > 1).
template <int V>
__device__ __forceinline__ void load_pack(const T* __restrict__ p, int i, int end, float* v, float fill) {
  if (i < end) {
    Pack<V> k;
    k.raw = *reinterpret_cast<const typename Pack<V>::Raw*>(p + i);
#pragma unroll
    for (int e = 0; e < V; ++e) v[e] = kz_to_float(k.v[e]);
  } else {
#pragma unroll
    for (int e = 0; e < V; ++e) v[e] = fill;
  }
}

template <int V>
__device__ __forceinline__ void store_pack(T* __restrict__ p, int i, int end, const float* v) {
  if (i < end) {
    Pack<V> k;
#pragma unroll
    for (int e = 0; e < V; ++e) k.v[e] = kz_from_float<T>(v[e]);
    *reinterpret_cast<typename Pack<V>::Raw*>(p + i) = k.raw;
  }
}

#endif
