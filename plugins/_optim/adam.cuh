// One Adam / AdamW step over contiguous arrays of T (float, kz_half or kz_bf16), in place, computed in float
// in torch's _single_tensor_adam order:
//   p *= decay (AdamW) or g = grad + wd * p (Adam's L2);  m = lerp(m, g, w1);  v = beta2 * v + (1 - beta2) * g^2;
//   v_max = max(v_max, v) (amsgrad);  p -= step_size * m / (sqrt(v or v_max) / bc2_sqrt + eps)
// Memory-bound: 64M fp32 elements move 1.88 GB (p, m, v read and written, grad read), 0.63 ms at 3.0 TB/s.
// adam_update_vec moves 16 bytes per access (4 floats or 8 halves); each thread issues ITEMS such loads per
// array, THREADS * 16 bytes apart, before its first store. It needs every array 16-byte aligned; the
// n % PACK elements after the last whole pack are done by block 0. adam_update_scalar moves one element per
// access. sqrtf and the division are IEEE (NVRTC's default -prec-sqrt/-prec-div), as torch's.

constexpr int PACK = 16 / (int)sizeof(T);

#include "../_cuda/streaming.cuh"

struct Adam {
  float step_size, bc2_sqrt, w1, beta2, eps, weight_decay, decay;
  int l2, shrink, amsgrad;

  // One element: p, m, v, v_max in and out (v_max only with amsgrad).
  __device__ __forceinline__ void step(float& p, float grad, float& m, float& v, float& v_max) const {
    if (shrink) p *= decay;
    const float g = l2 ? grad + weight_decay * p : grad;
    m = w1 < 0.5f ? m + w1 * (g - m) : g - (g - m) * (1.0f - w1);  // torch's lerp
    v = v * beta2 + (1.0f - beta2) * g * g;
    float v_hat = v;
    if (amsgrad) {  // NaN wins, as in torch.maximum
      v_max = (v_max != v_max || v != v) ? v_max + v : fmaxf(v_max, v);
      v_hat = v_max;
    }
    p = p - step_size * (m / (sqrtf(v_hat) / bc2_sqrt + eps));
  }
};

// Packs first, first + THREADS, ... (ITEMS of them, those below packs) of this thread, V elements each.
template <int V>
__device__ __forceinline__ void adam_chunk(T* __restrict__ p, const T* __restrict__ g, T* __restrict__ m,
                                           T* __restrict__ v, T* __restrict__ v_max, long long packs,
                                           long long first, const Adam& a) {
  typedef typename Pack<V>::Raw B;
  Pack<V> vp[ITEMS], vg[ITEMS], vm[ITEMS], vv[ITEMS], vx[ITEMS];
#pragma unroll
  for (int i = 0; i < ITEMS; ++i) {
    const long long k = first + (long long)i * THREADS;
    if (k < packs) {
      vp[i].raw = reinterpret_cast<const B*>(p)[k];
      vg[i].raw = reinterpret_cast<const B*>(g)[k];
      vm[i].raw = reinterpret_cast<const B*>(m)[k];
      vv[i].raw = reinterpret_cast<const B*>(v)[k];
      vx[i].raw = a.amsgrad ? reinterpret_cast<const B*>(v_max)[k] : vv[i].raw;  // not used without amsgrad
    }
  }
#pragma unroll
  for (int i = 0; i < ITEMS; ++i) {
    const long long k = first + (long long)i * THREADS;
    if (k < packs) {
#pragma unroll
      for (int e = 0; e < V; ++e) {
        float pf = kz_to_float(vp[i].v[e]), mf = kz_to_float(vm[i].v[e]), vf = kz_to_float(vv[i].v[e]);
        float xf = kz_to_float(vx[i].v[e]);
        a.step(pf, kz_to_float(vg[i].v[e]), mf, vf, xf);
        vp[i].v[e] = kz_from_float<T>(pf);
        vm[i].v[e] = kz_from_float<T>(mf);
        vv[i].v[e] = kz_from_float<T>(vf);
        vx[i].v[e] = kz_from_float<T>(xf);
      }
      reinterpret_cast<B*>(p)[k] = vp[i].raw;
      reinterpret_cast<B*>(m)[k] = vm[i].raw;
      reinterpret_cast<B*>(v)[k] = vv[i].raw;
      if (a.amsgrad) reinterpret_cast<B*>(v_max)[k] = vx[i].raw;
    }
  }
}

// The n % V elements after the last whole pack (fewer than V < THREADS), one per thread of the calling block.
__device__ __forceinline__ void adam_tail(T* __restrict__ p, const T* __restrict__ g, T* __restrict__ m,
                                          T* __restrict__ v, T* __restrict__ v_max, long long n, long long done,
                                          const Adam& a) {
  const long long j = done + threadIdx.x;
  if (j < n) {
    float pf = kz_to_float(p[j]), mf = kz_to_float(m[j]), vf = kz_to_float(v[j]);
    float xf = a.amsgrad ? kz_to_float(v_max[j]) : 0.0f;
    a.step(pf, kz_to_float(g[j]), mf, vf, xf);
    p[j] = kz_from_float<T>(pf);
    m[j] = kz_from_float<T>(mf);
    v[j] = kz_from_float<T>(vf);
    if (a.amsgrad) v_max[j] = kz_from_float<T>(xf);
  }
}

template <int V>
__device__ __forceinline__ void adam_packs(T* __restrict__ p, const T* __restrict__ g, T* __restrict__ m,
                                           T* __restrict__ v, T* __restrict__ v_max, long long n, const Adam& a) {
  const long long packs = n / V;
  adam_chunk<V>(p, g, m, v, v_max, packs, (long long)blockIdx.x * (THREADS * ITEMS) + threadIdx.x, a);
  if (V > 1 && blockIdx.x == 0) adam_tail(p, g, m, v, v_max, n, packs * V, a);
}

#define ADAM_PARAMS                                                                                         \
  (T* __restrict__ p, const T* __restrict__ g, T* __restrict__ m, T* __restrict__ v, T* __restrict__ v_max, \
   long long n, float step_size, float bc2_sqrt, float w1, float beta2, float eps, float weight_decay,      \
   float decay, int decoupled, int amsgrad)
#define ADAM_BODY(V)                                                                                         \
  adam_packs<V>(p, g, m, v, v_max, n,                                                                        \
                Adam{step_size, bc2_sqrt, w1, beta2, eps, weight_decay, decay,                               \
                     weight_decay != 0.0f && !decoupled, weight_decay != 0.0f && decoupled, amsgrad})
