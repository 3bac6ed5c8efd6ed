// adam_update_foreach_: the Adam element update of ../_optim/adam.cuh on every entry of a
// table in one launch. Row t of the table holds entry t's addresses p, grad, m, v, v_max (0 without
// amsgrad) and its size n, as long longs. Block b takes chunks b, b + gridDim.x, ... of THREADS·ITEMS
// packs of every entry, so each entry spreads over all blocks whatever its size. An entry whose arrays
// are all 16-byte aligned moves 16 bytes per access; the others one element per access.
#include "../_optim/adam.cuh"

template <int V>
__device__ __forceinline__ void adam_entry(T* p, const T* g, T* m, T* v, T* v_max, long long n, const Adam& a) {
  const long long packs = n / V;
  const long long chunk = THREADS * ITEMS;
  for (long long first = (long long)blockIdx.x * chunk; first < packs; first += (long long)gridDim.x * chunk)
    adam_chunk<V>(p, g, m, v, v_max, packs, first + threadIdx.x, a);
  if (V > 1 && blockIdx.x == gridDim.x - 1) adam_tail(p, g, m, v, v_max, n, packs * V, a);
}

extern "C" __global__ void __launch_bounds__(THREADS)
    adam_update_foreach(const long long* __restrict__ table, int tensors, float step_size, float bc2_sqrt, float w1,
                        float beta2, float eps, float weight_decay, float decay, int decoupled, int amsgrad) {
  const Adam a{step_size, bc2_sqrt, w1, beta2, eps, weight_decay, decay, weight_decay != 0.0f && !decoupled,
               weight_decay != 0.0f && decoupled, amsgrad};
  for (int t = 0; t < tensors; ++t) {
    const long long* row = table + 6 * t;
    T* p = reinterpret_cast<T*>(row[0]);
    const T* g = reinterpret_cast<const T*>(row[1]);
    T* m = reinterpret_cast<T*>(row[2]);
    T* v = reinterpret_cast<T*>(row[3]);
    T* v_max = amsgrad ? reinterpret_cast<T*>(row[4]) : v;
    const long long n = row[5];
    if (((row[0] | row[1] | row[2] | row[3] | (amsgrad ? row[4] : 0)) & 15) == 0)
      adam_entry<PACK>(p, g, m, v, v_max, n, a);
    else
      adam_entry<1>(p, g, m, v, v_max, n, a);
  }
}
