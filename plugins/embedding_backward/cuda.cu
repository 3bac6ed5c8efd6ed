// embedding backward, per-row owner: out[v, :] = sum of g[order[p], :] for p in [starts[v], starts[v + 1]) (the
// positions with index v, in increasing order: sorted by the wrapper), 0 for v = padding_idx; g's rows
// g_stride elements apart (column stride 1), out contiguous. One block per table row writes the row once,
// each thread adding 16-byte packs (emb_owner_vec: dim, g_stride and both pointers multiples of 16 bytes,
// checked by the wrapper) or single elements (emb_owner_scalar) in float, in position order: deterministic,
// no atomics, no zero-fill pass (rows never indexed are written as zeros here).
#ifndef THREADS
#define THREADS 256
#endif

constexpr int PACK = 16 / (int)sizeof(T);

// Pack<V>: V elements of T as one access
#include "../_cuda/pack.cuh"

template <int V>
__device__ __forceinline__ void emb_owner(const T* __restrict__ g, const long long* __restrict__ order,
                                          const long long* __restrict__ starts, T* __restrict__ out, int dim,
                                          long long g_stride, long long padding_idx) {
  typedef typename Pack<V>::Raw Raw;
  const long long v = blockIdx.x;
  const long long lo = v == padding_idx ? 0 : starts[v], hi = v == padding_idx ? 0 : starts[v + 1];
  Raw* dst = reinterpret_cast<Raw*>(out + v * dim);
  const int packs = dim / V;
  for (int k = threadIdx.x; k < packs; k += blockDim.x) {
    float acc[V];
#pragma unroll
    for (int e = 0; e < V; ++e) acc[e] = 0.0f;
    for (long long p = lo; p < hi; ++p) {
      Pack<V> q;
      q.raw = reinterpret_cast<const Raw*>(g + order[p] * g_stride)[k];
#pragma unroll
      for (int e = 0; e < V; ++e) acc[e] += kz_to_float(q.v[e]);
    }
    Pack<V> o;
#pragma unroll
    for (int e = 0; e < V; ++e) o.v[e] = kz_from_float<T>(acc[e]);
    dst[k] = o.raw;
  }
}

#define KZ_KERNELS(name, params, args)                                                              \
  extern "C" __global__ void __launch_bounds__(THREADS) name##_vec params { name<PACK> args; }      \
  extern "C" __global__ void __launch_bounds__(THREADS) name##_scalar params { name<1> args; }

KZ_KERNELS(emb_owner,
           (const T* __restrict__ g, const long long* __restrict__ order, const long long* __restrict__ starts,
            T* __restrict__ out, int dim, long long g_stride, long long padding_idx),
           (g, order, starts, out, dim, g_stride, padding_idx))
