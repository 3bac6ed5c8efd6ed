// The row kernels' 16-byte loads and stores (softmax, cross_entropy, layer_norm and their backwards): PACK
// elements of T per access, at most ITEMS. load_pack fills the slots past a row's end with the caller's neutral
// value (-inf for a max, 0 for a sum). ITEMS (elements a thread holds) and THREADS (a block's threads) are the
// config's defines; the defaults below stand where an includer or the config does not define them first. An
// includer that reads optional rows (layer_norm_backward's absent weight) defines KZ_NULLABLE_ROWS 1: a null
// pointer then loads as `fill`.
#ifndef KZ_ROW_PACKS_CUH
#define KZ_ROW_PACKS_CUH
#ifndef ITEMS
#define ITEMS 16
#endif
#ifndef THREADS
#define THREADS 512
#endif
#ifndef KZ_NULLABLE_ROWS
#define KZ_NULLABLE_ROWS 0
#endif

constexpr int PACK = 16 / (int)sizeof(T) < ITEMS ? 16 / (int)sizeof(T) : ITEMS;
static_assert(ITEMS % PACK == 0, "ITEMS must be a power of two");

// Pack<V>: V elements of T as one access
#include "pack.cuh"

// v[0..V) = p[i..i+V) as float, or `fill` when i >= end (or p is null, with KZ_NULLABLE_ROWS); V divides
// end - i when V > 1.
template <int V>
__device__ __forceinline__ void load_pack(const T* __restrict__ p, int i, int end, float* v, float fill) {
  if ((!KZ_NULLABLE_ROWS || p != nullptr) && i < end) {
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
