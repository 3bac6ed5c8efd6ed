// cross_entropy backward over the rows of a (rows, c) matrix of logits of T (float, kz_half or kz_bf16):
// class stride 1, rows x_stride apart; the gradient is contiguous. One block per row, one pass:
//   grad = (exp(x - lse) - smoothing / c - (1 - smoothing) * [col == target]) * scale
// scale = grad[row] (reduction 0, none), grad[0] / count (1, mean), grad[0] (2, sum); ignored rows and rows
// of scale 0 are written as zeros without reading the logits. One read of the logits and one write of the
// gradient (8192 x 50257 fp32: 3.3 GB, 1.1 ms at 3.0 TB/s).
//
// Rows need not be 16-byte aligned (c = 50257 is odd): each row is a head of up to PACK - 1 elements before
// its first 16-byte boundary, a body of 16-byte packs and a tail; head and tail go one element per thread.
// ce_grad_vec needs the logits' row and the gradient's row equally misaligned (the wrapper checks the
// pointers and the row stride); ce_grad_scalar moves one element per access. Each step a thread loads
// ITEMS elements (ITEMS / V packs, blockDim.x packs apart) before it computes.

#include "../_cuda/row_packs.cuh"

struct Grad {  // one row's formula
  float lse, scale, spread, hit;  // hit = 1 - smoothing, at the target's column
  long long target;

  __device__ __forceinline__ float operator()(float x, long long col) const {
    return (__expf(x - lse) - spread - (col == target ? hit : 0.0f)) * scale;
  }
};

// One block per row. count: the non-ignored targets (mean only; else unread).
template <int V>
__device__ __forceinline__ void ce_grad(const T* __restrict__ x, const long long* __restrict__ target,
                                        const float* __restrict__ lse, const T* __restrict__ grad,
                                        const float* __restrict__ count, T* __restrict__ out, int c,
                                        long long x_stride, long long ignore_index, float smoothing, int reduction) {
  const long long row = blockIdx.x;
  const long long t = target[row];
  float scale = 0.0f;
  if (t != ignore_index)
    scale = reduction == 0 ? kz_to_float(grad[row]) : reduction == 1 ? kz_to_float(grad[0]) / count[0]
                                                                     : kz_to_float(grad[0]);
  const Grad f{lse[row], scale, smoothing / c, 1.0f - smoothing, t};
  const T* xr = x + row * x_stride;
  T* orow = out + row * c;
  const int head = V > 1 ? min(c, (int)(((16u - (unsigned)((size_t)orow & 15u)) & 15u) / sizeof(T))) : 0;
  const int packs = (c - head) / V, tail = head + packs * V;
  const bool zero = scale == 0.0f;  // uniform over the block
  if ((int)threadIdx.x < head) {
    const int col = threadIdx.x;
    orow[col] = kz_from_float<T>(zero ? 0.0f : f(kz_to_float(xr[col]), col));
  }
  if ((int)threadIdx.x < c - tail) {
    const int col = tail + threadIdx.x;
    orow[col] = kz_from_float<T>(zero ? 0.0f : f(kz_to_float(xr[col]), col));
  }
  typedef typename Pack<V>::Raw Raw;
  const Raw* in = reinterpret_cast<const Raw*>(xr + head);
  Raw* o = reinterpret_cast<Raw*>(orow + head);
  constexpr int K = ITEMS / V;
  for (int base = 0; base < packs; base += (int)blockDim.x * K) {
    Pack<V> q[K];
    if (!zero) {
#pragma unroll
      for (int k = 0; k < K; ++k) {
        const int p = base + k * (int)blockDim.x + (int)threadIdx.x;
        if (p < packs) q[k].raw = in[p];
      }
    }
#pragma unroll
    for (int k = 0; k < K; ++k) {
      const int p = base + k * (int)blockDim.x + (int)threadIdx.x;
      if (p < packs) {
#pragma unroll
        for (int e = 0; e < V; ++e)
          q[k].v[e] = kz_from_float<T>(zero ? 0.0f : f(kz_to_float(q[k].v[e]), head + (long long)p * V + e));
        o[p] = q[k].raw;
      }
    }
  }
}

#define KZ_KERNELS(name, params, args)                                                              \
  extern "C" __global__ void __launch_bounds__(THREADS) name##_vec params { name<PACK> args; }      \
  extern "C" __global__ void __launch_bounds__(THREADS) name##_scalar params { name<1> args; }

KZ_KERNELS(ce_grad,
           (const T* __restrict__ x, const long long* __restrict__ target, const float* __restrict__ lse,
            const T* __restrict__ grad, const float* __restrict__ count, T* __restrict__ out, int c,
            long long x_stride, long long ignore_index, float smoothing, int reduction),
           (x, target, lse, grad, count, out, c, x_stride, ignore_index, smoothing, reduction))

// count[0] = the targets that are not ignore_index, as a float. One block of 1024 threads.
extern "C" __global__ void __launch_bounds__(1024) ce_count(const long long* __restrict__ target,
                                                            float* __restrict__ count, long long rows,
                                                            long long ignore_index) {
  __shared__ float red[32];
  float n = 0.0f;
  for (long long r = threadIdx.x; r < rows; r += blockDim.x) n += target[r] != ignore_index ? 1.0f : 0.0f;
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) n += __shfl_xor_sync(0xffffffffu, n, o);
  if ((threadIdx.x & 31) == 0) red[threadIdx.x >> 5] = n;
  __syncthreads();
  if (threadIdx.x == 0) {
    float total = 0.0f;
    for (int w = 0; w < (int)(blockDim.x >> 5); ++w) total += red[w];
    count[0] = total;
  }
}
