// One SGD step over contiguous arrays of T (float, kz_half or kz_bf16), in place, computed in float in
// torch's _single_tensor_sgd order:
//   g = grad + wd * p;  b = momentum * b + (1 - dampening) * g;  g = nesterov ? g + momentum * b : b;
//   p = p - lr * g
// Memory-bound: 64M fp32 elements with momentum move 1.3 GB (p, b read and written, grad read), 0.45 ms at
// 3.0 TB/s. sgd_update_vec moves 16 bytes per access (4 floats or 8 halves); each thread issues ITEMS such
// loads per array, THREADS * 16 bytes apart, before its first store. It needs every array 16-byte aligned;
// the n % PACK elements after the last whole pack are done by block 0. sgd_update_scalar moves one element
// per access. The flags are uniform over the grid: no divergence.

constexpr int PACK = 16 / (int)sizeof(T);

#include "../_cuda/streaming.cuh"

struct Sgd {
  float lr, momentum, keep, weight_decay;  // keep = 1 - dampening
  int use_momentum, nesterov;

  __device__ __forceinline__ void step(float& p, float grad, float& b) const {
    float g = weight_decay != 0.0f ? grad + weight_decay * p : grad;
    if (use_momentum) {
      b = momentum * b + keep * g;
      g = nesterov ? g + momentum * b : b;
    }
    p = p - lr * g;
  }
};

template <int V>
__device__ __forceinline__ void sgd_packs(T* __restrict__ p, const T* __restrict__ g, T* __restrict__ b, long long n,
                                          const Sgd& s) {
  typedef typename Pack<V>::Raw B;
  const long long packs = n / V;
  const long long first = (long long)blockIdx.x * (THREADS * ITEMS) + threadIdx.x;
  Pack<V> vp[ITEMS], vg[ITEMS], vb[ITEMS];
#pragma unroll
  for (int i = 0; i < ITEMS; ++i) {
    const long long k = first + (long long)i * THREADS;
    if (k < packs) {
      vp[i].raw = reinterpret_cast<const B*>(p)[k];
      vg[i].raw = reinterpret_cast<const B*>(g)[k];
      vb[i].raw = s.use_momentum ? reinterpret_cast<const B*>(b)[k] : vp[i].raw;  // not used without momentum
    }
  }
#pragma unroll
  for (int i = 0; i < ITEMS; ++i) {
    const long long k = first + (long long)i * THREADS;
    if (k < packs) {
#pragma unroll
      for (int e = 0; e < V; ++e) {
        float pf = kz_to_float(vp[i].v[e]), bf = kz_to_float(vb[i].v[e]);
        s.step(pf, kz_to_float(vg[i].v[e]), bf);
        vp[i].v[e] = kz_from_float<T>(pf);
        vb[i].v[e] = kz_from_float<T>(bf);
      }
      reinterpret_cast<B*>(p)[k] = vp[i].raw;
      if (s.use_momentum) reinterpret_cast<B*>(b)[k] = vb[i].raw;
    }
  }
  if (V > 1 && blockIdx.x == 0) {  // the tail after the last whole pack: fewer than V < THREADS elements
    const long long j = packs * V + threadIdx.x;
    if (j < n) {
      float pf = kz_to_float(p[j]), bf = s.use_momentum ? kz_to_float(b[j]) : 0.0f;
      s.step(pf, kz_to_float(g[j]), bf);
      p[j] = kz_from_float<T>(pf);
      if (s.use_momentum) b[j] = kz_from_float<T>(bf);
    }
  }
}

#define SGD_PARAMS                                                                                          \
  (T* __restrict__ p, const T* __restrict__ g, T* __restrict__ b, long long n, float lr, float momentum,     \
   float dampening, float weight_decay, int nesterov)
#define SGD_BODY(V) \
  sgd_packs<V>(p, g, b, n, Sgd{lr, momentum, 1.0f - dampening, weight_decay, momentum != 0.0f, nesterov})

extern "C" __global__ void __launch_bounds__(THREADS) sgd_update_vec SGD_PARAMS { SGD_BODY(PACK); }
extern "C" __global__ void __launch_bounds__(THREADS) sgd_update_scalar SGD_PARAMS { SGD_BODY(1); }
