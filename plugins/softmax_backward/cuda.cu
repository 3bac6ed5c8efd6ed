// softmax's gradient over the rows of (rows, cols) matrices of T (float, kz_half or kz_bf16): grad and y
// have column stride 1 and rows g_stride and y_stride apart; dx is contiguous. Computes in float:
// dx = y * (grad - s), s = sum over the row of grad * y.
//
// softmax_backward_fits: a row held in registers, ITEMS elements of grad and of y per thread, by one warp
//   (group = 32, several rows per block) or by the whole block (group = blockDim.x): grad and y are read
//   once and dx written once, the floor's traffic; s is one shuffle (and shared-memory) reduction.
// softmax_backward_looped: a longer row by one block, twice: s, then dx (the second read mostly hits L2).
// softmax_backward_chunk_dot + softmax_backward_chunk_write: the same with each row split into chunks over
//   several blocks, for fewer rows than the GPU holds blocks; the write kernel adds the row's chunk sums
//   in a fixed order, so results do not depend on scheduling.
//
// Each kernel comes as _vec (PACK elements per 16-byte access; the wrapper checks that cols, both row
// strides and the three pointers allow it) and _scalar (one element per access). Out-of-row slots hold
// 0 in grad and y, adding 0 * 0 to s. NaN and inf follow the formula, as torch's kernel does.

#include "../_cuda/row_packs.cuh"

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

// The sum over the block, returned to every thread (a fixed tree: deterministic). red: 33 floats of
// shared memory; red[32] is written only after the first barrier, which every thread reaches after
// reading the previous call's red[32], so calls may follow each other.
__device__ __forceinline__ float block_sum(float v, float* red) {
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  v = warp_sum(v);
  if (lane == 0) red[warp] = v;
  __syncthreads();
  if (warp == 0) {
    float w = lane < (int)(blockDim.x >> 5) ? red[lane] : 0.0f;
    w = warp_sum(w);
    if (lane == 0) red[32] = w;
  }
  __syncthreads();
  return red[32];
}

// ---- rows held in registers ------------------------------------------------------------------------

// Thread `lane` of a group of `group` threads holds ITEMS elements of the row: packs k * group + lane
// (k < ITEMS / V), so consecutive threads read consecutive packs. group * ITEMS >= cols.
template <int V>
__device__ __forceinline__ void softmax_backward_fits(const T* __restrict__ g, const T* __restrict__ y,
                                                      T* __restrict__ dx, int rows, int cols, long long g_stride,
                                                      long long y_stride, int group) {
  __shared__ float red[33];
  const int lane = threadIdx.x % group;
  const long long row = (long long)blockIdx.x * (blockDim.x / group) + threadIdx.x / group;
  if (row >= rows) return;  // whole warps only (group 32); never for group = blockDim.x (grid = rows)
  const T* gr = g + row * g_stride;
  const T* yr = y + row * y_stride;
  float gv[ITEMS], yv[ITEMS];
#pragma unroll
  for (int k = 0; k < ITEMS / V; ++k) {
    load_pack<V>(gr, (k * group + lane) * V, cols, gv + k * V, 0.0f);
    load_pack<V>(yr, (k * group + lane) * V, cols, yv + k * V, 0.0f);
  }
  float s = 0.0f;
#pragma unroll
  for (int j = 0; j < ITEMS; ++j) s += gv[j] * yv[j];
  s = group == 32 ? warp_sum(s) : block_sum(s, red);
#pragma unroll
  for (int j = 0; j < ITEMS; ++j) gv[j] = yv[j] * (gv[j] - s);
  T* dr = dx + row * cols;
#pragma unroll
  for (int k = 0; k < ITEMS / V; ++k) store_pack<V>(dr, (k * group + lane) * V, cols, gv + k * V);
}

// ---- long rows: the dot product, then a second pass ----------------------------------------------

// This thread's share of sum(grad * y) over [lo, hi), a block-wide tile of blockDim.x * ITEMS per step:
// 2 * ITEMS / V independent loads in flight per thread.
template <int V>
__device__ __forceinline__ float thread_dot(const T* __restrict__ gr, const T* __restrict__ yr, int lo, int hi) {
  float s = 0.0f;
  for (int base = lo; base < hi; base += blockDim.x * ITEMS) {
    float gv[ITEMS], yv[ITEMS];
#pragma unroll
    for (int k = 0; k < ITEMS / V; ++k) {
      const int i = base + (k * (int)blockDim.x + (int)threadIdx.x) * V;
      load_pack<V>(gr, i, hi, gv + k * V, 0.0f);
      load_pack<V>(yr, i, hi, yv + k * V, 0.0f);
    }
#pragma unroll
    for (int j = 0; j < ITEMS; ++j) s += gv[j] * yv[j];
  }
  return s;
}

// dx[lo, hi) = y * (grad - s).
template <int V>
__device__ __forceinline__ void write_dx(const T* __restrict__ gr, const T* __restrict__ yr, T* __restrict__ dr,
                                         int lo, int hi, float s) {
  for (int base = lo; base < hi; base += blockDim.x * ITEMS) {
    float gv[ITEMS], yv[ITEMS];
#pragma unroll
    for (int k = 0; k < ITEMS / V; ++k) {
      const int i = base + (k * (int)blockDim.x + (int)threadIdx.x) * V;
      load_pack<V>(gr, i, hi, gv + k * V, 0.0f);
      load_pack<V>(yr, i, hi, yv + k * V, 0.0f);
    }
#pragma unroll
    for (int j = 0; j < ITEMS; ++j) gv[j] = yv[j] * (gv[j] - s);
#pragma unroll
    for (int k = 0; k < ITEMS / V; ++k)
      store_pack<V>(dr, base + (k * (int)blockDim.x + (int)threadIdx.x) * V, hi, gv + k * V);
  }
}

// One block per row (grid = rows).
template <int V>
__device__ __forceinline__ void softmax_backward_looped(const T* __restrict__ g, const T* __restrict__ y,
                                                        T* __restrict__ dx, int cols, long long g_stride,
                                                        long long y_stride) {
  __shared__ float red[33];
  const long long row = blockIdx.x;
  const T* gr = g + row * g_stride;
  const T* yr = y + row * y_stride;
  const float s = block_sum(thread_dot<V>(gr, yr, 0, cols), red);
  write_dx<V>(gr, yr, dx + row * cols, 0, cols, s);
}

// grid = (chunks, rows): dots[row][chunk] = sum(grad * y) over [chunk * chunk_len, + chunk_len).
template <int V>
__device__ __forceinline__ void softmax_backward_chunk_dot(const T* __restrict__ g, const T* __restrict__ y,
                                                           float* __restrict__ dots, int cols, long long g_stride,
                                                           long long y_stride, int chunk_len) {
  __shared__ float red[33];
  const long long row = blockIdx.y;
  const int lo = blockIdx.x * chunk_len, hi = min(lo + chunk_len, cols);
  const float s = block_sum(thread_dot<V>(g + row * g_stride, y + row * y_stride, lo, hi), red);
  if (threadIdx.x == 0) dots[row * gridDim.x + blockIdx.x] = s;
}

// grid = (chunks, rows): adds the row's chunk sums, then writes this block's chunk.
template <int V>
__device__ __forceinline__ void softmax_backward_chunk_write(const T* __restrict__ g, const T* __restrict__ y,
                                                             T* __restrict__ dx, const float* __restrict__ dots,
                                                             int cols, long long g_stride, long long y_stride,
                                                             int chunk_len) {
  __shared__ float red[33];
  const long long row = blockIdx.y;
  float part = 0.0f;
  for (int c = threadIdx.x; c < (int)gridDim.x; c += blockDim.x) part += dots[row * gridDim.x + c];
  const float s = block_sum(part, red);
  const int lo = blockIdx.x * chunk_len, hi = min(lo + chunk_len, cols);
  write_dx<V>(g + row * g_stride, y + row * y_stride, dx + row * cols, lo, hi, s);
}

// ---- entry points: each body for 16-byte packs (_vec) and for single elements (_scalar) -------------

#define KZ_KERNELS(name, params, args)                                                              \
  extern "C" __global__ void __launch_bounds__(THREADS) name##_vec params { name<PACK> args; }      \
  extern "C" __global__ void __launch_bounds__(THREADS) name##_scalar params { name<1> args; }

KZ_KERNELS(softmax_backward_fits,
           (const T* __restrict__ g, const T* __restrict__ y, T* __restrict__ dx, int rows, int cols,
            long long g_stride, long long y_stride, int group),
           (g, y, dx, rows, cols, g_stride, y_stride, group))
KZ_KERNELS(softmax_backward_looped,
           (const T* __restrict__ g, const T* __restrict__ y, T* __restrict__ dx, int cols, long long g_stride,
            long long y_stride),
           (g, y, dx, cols, g_stride, y_stride))
KZ_KERNELS(softmax_backward_chunk_dot,
           (const T* __restrict__ g, const T* __restrict__ y, float* __restrict__ dots, int cols,
            long long g_stride, long long y_stride, int chunk_len),
           (g, y, dots, cols, g_stride, y_stride, chunk_len))
KZ_KERNELS(softmax_backward_chunk_write,
           (const T* __restrict__ g, const T* __restrict__ y, T* __restrict__ dx, const float* __restrict__ dots,
            int cols, long long g_stride, long long y_stride, int chunk_len),
           (g, y, dx, dots, cols, g_stride, y_stride, chunk_len))
