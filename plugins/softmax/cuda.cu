// softmax over the rows of a (rows, cols) matrix of T (float, kz_half or kz_bf16): column stride 1,
// rows x_stride apart; y is contiguous. Computes in float.
//
// softmax_fits: a row held in registers, ITEMS elements per thread, by one warp (group = 32,
//   several rows per block) or by the whole block (group = blockDim.x): x is read once and y
//   written once, the floor's traffic. Max and sum are two shuffle (and shared-memory) reductions,
//   so each element costs one exp.
// softmax_looped: a longer row by one block, twice: an online max and rescaled sum per thread,
//   merged across the block, then y = exp(x - max) / sum (the second read mostly hits L2).
// softmax_chunk_stats + softmax_chunk_write: the same with each row split into chunks over several
//   blocks, for fewer rows than the GPU holds blocks; the write kernel merges the chunks' stats.
//
// Each kernel comes as _vec (PACK elements per 16-byte access; the wrapper checks that cols, the
// row stride and both pointers allow it) and _scalar (one element per access).
//
// NaN and inf follow torch: fmaxf ignores NaN, but exp(NaN - m) makes the sum NaN; a max of +inf
// gives inf - inf = NaN, a row of only -inf gives -inf - -inf = NaN. Out-of-row slots hold -inf,
// whose exp is 0. __expf (ex2.approx) is within 2 ulp near 0 and its error grows with |x - max|
// only where the result is tiny: every output is <= 1, far inside the 1e-5 atol.

#include "../_cuda/row_packs.cuh"

__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

// Max (IS_MAX) or sum over the block, returned to every thread. red: 33 floats of shared memory.
// Calls may follow each other without a barrier between: a call writes red[32] only after its
// first barrier, which every thread reaches after reading the previous red[32].
template <bool IS_MAX>
__device__ __forceinline__ float block_reduce(float v, float* red) {
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  v = IS_MAX ? warp_max(v) : warp_sum(v);
  if (lane == 0) red[warp] = v;
  __syncthreads();
  if (warp == 0) {
    float w = lane < (int)(blockDim.x >> 5) ? red[lane] : (IS_MAX ? -KZ_INF : 0.0f);
    w = IS_MAX ? warp_max(w) : warp_sum(w);
    if (lane == 0) red[32] = w;
  }
  __syncthreads();
  return red[32];
}

// ---- rows held in registers ------------------------------------------------------------------

// Thread `lane` of a group of `group` threads holds ITEMS elements of the row: packs k * group +
// lane (k < ITEMS / V), so consecutive threads read consecutive packs. group * ITEMS >= cols.
template <int V>
__device__ __forceinline__ void softmax_fits(const T* __restrict__ x, T* __restrict__ y, int rows,
                                             int cols, long long x_stride, int group) {
  __shared__ float red[33];
  const int lane = threadIdx.x % group;
  const long long row = (long long)blockIdx.x * (blockDim.x / group) + threadIdx.x / group;
  if (row >= rows) return;  // whole warps only (group 32); never for group = blockDim.x (grid = rows)
  const T* xr = x + row * x_stride;
  float v[ITEMS];
#pragma unroll
  for (int k = 0; k < ITEMS / V; ++k) load_pack<V>(xr, (k * group + lane) * V, cols, v + k * V, -KZ_INF);
  float m = -KZ_INF;
#pragma unroll
  for (int j = 0; j < ITEMS; ++j) m = fmaxf(m, v[j]);
  m = group == 32 ? warp_max(m) : block_reduce<true>(m, red);
  float s = 0.0f;
#pragma unroll
  for (int j = 0; j < ITEMS; ++j) {
    v[j] = __expf(v[j] - m);
    s += v[j];
  }
  s = group == 32 ? warp_sum(s) : block_reduce<false>(s, red);
  const float inv = 1.0f / s;
#pragma unroll
  for (int j = 0; j < ITEMS; ++j) v[j] *= inv;
  T* yr = y + row * cols;
#pragma unroll
  for (int k = 0; k < ITEMS / V; ++k) store_pack<V>(yr, (k * group + lane) * V, cols, v + k * V);
}

// ---- long rows: online statistics, then a second pass --------------------------------------------

// (m, s) <- the max and sum of exp(. - max) of both. A max of -inf subtracts 0 instead, so that
// two empty (all -inf) parts give 0, not exp(-inf - -inf) = NaN.
__device__ __forceinline__ void merge(float& m, float& s, float m2, float s2) {
  const float m_new = fmaxf(m, m2);
  const float m_safe = m_new == -KZ_INF ? 0.0f : m_new;
  s = s * __expf(m - m_safe) + s2 * __expf(m2 - m_safe);
  m = m_new;
}

// This thread's (max, sum) over row[lo, hi), a block-wide tile of blockDim.x * ITEMS per step:
// ITEMS / V independent loads in flight per thread, one exp per element plus one per tile.
template <int V>
__device__ __forceinline__ void thread_stats(const T* __restrict__ row, int lo, int hi, float& m, float& s) {
  m = -KZ_INF;
  s = 0.0f;
  for (int base = lo; base < hi; base += blockDim.x * ITEMS) {
    float v[ITEMS];
#pragma unroll
    for (int k = 0; k < ITEMS / V; ++k)
      load_pack<V>(row, base + (k * (int)blockDim.x + (int)threadIdx.x) * V, hi, v + k * V, -KZ_INF);
    float m_new = m;
#pragma unroll
    for (int j = 0; j < ITEMS; ++j) m_new = fmaxf(m_new, v[j]);
    const float m_safe = m_new == -KZ_INF ? 0.0f : m_new;
    float acc = 0.0f;
#pragma unroll
    for (int j = 0; j < ITEMS; ++j) acc += __expf(v[j] - m_safe);
    s = s * __expf(m - m_safe) + acc;
    m = m_new;
  }
}

// Merges every thread's (m, s) into the block's, returned to every thread.
__device__ __forceinline__ void block_merge(float& m, float& s) {
  __shared__ float2 red[33];
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
#pragma unroll
  for (int o = 16; o > 0; o >>= 1)
    merge(m, s, __shfl_xor_sync(0xffffffffu, m, o), __shfl_xor_sync(0xffffffffu, s, o));
  if (lane == 0) red[warp] = make_float2(m, s);
  __syncthreads();
  if (warp == 0) {
    float2 w = lane < (int)(blockDim.x >> 5) ? red[lane] : make_float2(-KZ_INF, 0.0f);
#pragma unroll
    for (int o = 16; o > 0; o >>= 1)
      merge(w.x, w.y, __shfl_xor_sync(0xffffffffu, w.x, o), __shfl_xor_sync(0xffffffffu, w.y, o));
    if (lane == 0) red[32] = w;
  }
  __syncthreads();
  m = red[32].x;
  s = red[32].y;
}

// y[lo, hi) = exp(x - m) / s; m = -inf (a row of only -inf) makes it NaN, as torch does.
template <int V>
__device__ __forceinline__ void write_scaled_exp(const T* __restrict__ xr, T* __restrict__ yr, int lo,
                                                 int hi, float m, float s) {
  const float inv = 1.0f / s;
  for (int base = lo; base < hi; base += blockDim.x * ITEMS) {
    float v[ITEMS];
#pragma unroll
    for (int k = 0; k < ITEMS / V; ++k)
      load_pack<V>(xr, base + (k * (int)blockDim.x + (int)threadIdx.x) * V, hi, v + k * V, -KZ_INF);
#pragma unroll
    for (int j = 0; j < ITEMS; ++j) v[j] = __expf(v[j] - m) * inv;
#pragma unroll
    for (int k = 0; k < ITEMS / V; ++k)
      store_pack<V>(yr, base + (k * (int)blockDim.x + (int)threadIdx.x) * V, hi, v + k * V);
  }
}

// One block per row (grid = rows).
template <int V>
__device__ __forceinline__ void softmax_looped(const T* __restrict__ x, T* __restrict__ y, int cols,
                                               long long x_stride) {
  const long long row = blockIdx.x;
  float m, s;
  thread_stats<V>(x + row * x_stride, 0, cols, m, s);
  block_merge(m, s);
  write_scaled_exp<V>(x + row * x_stride, y + row * cols, 0, cols, m, s);
}

// grid = (chunks, rows): stats[row][chunk] = (max, sum) of x[row][chunk * chunk_len, + chunk_len).
template <int V>
__device__ __forceinline__ void softmax_chunk_stats(const T* __restrict__ x, float2* __restrict__ stats,
                                                    int cols, long long x_stride, int chunk_len) {
  const long long row = blockIdx.y;
  const int lo = blockIdx.x * chunk_len, hi = min(lo + chunk_len, cols);
  float m, s;
  thread_stats<V>(x + row * x_stride, lo, hi, m, s);
  block_merge(m, s);
  if (threadIdx.x == 0) stats[row * gridDim.x + blockIdx.x] = make_float2(m, s);
}

// grid = (chunks, rows): merges the row's chunk stats, then writes this block's chunk.
template <int V>
__device__ __forceinline__ void softmax_chunk_write(const T* __restrict__ x, T* __restrict__ y,
                                                    const float2* __restrict__ stats, int cols,
                                                    long long x_stride, int chunk_len) {
  const long long row = blockIdx.y;
  float m = -KZ_INF, s = 0.0f;
  for (int c = threadIdx.x; c < (int)gridDim.x; c += blockDim.x) {
    const float2 part = stats[row * gridDim.x + c];
    merge(m, s, part.x, part.y);
  }
  block_merge(m, s);
  const int lo = blockIdx.x * chunk_len, hi = min(lo + chunk_len, cols);
  write_scaled_exp<V>(x + row * x_stride, y + row * cols, lo, hi, m, s);
}

// ---- entry points: each body for 16-byte packs (_vec) and for single elements (_scalar) ----------

#define KZ_KERNELS(name, params, args)                                                              \
  extern "C" __global__ void __launch_bounds__(THREADS) name##_vec params { name<PACK> args; }      \
  extern "C" __global__ void __launch_bounds__(THREADS) name##_scalar params { name<1> args; }

KZ_KERNELS(softmax_fits,
           (const T* __restrict__ x, T* __restrict__ y, int rows, int cols, long long x_stride, int group),
           (x, y, rows, cols, x_stride, group))
KZ_KERNELS(softmax_looped, (const T* __restrict__ x, T* __restrict__ y, int cols, long long x_stride),
           (x, y, cols, x_stride))
KZ_KERNELS(softmax_chunk_stats,
           (const T* __restrict__ x, float2* __restrict__ stats, int cols, long long x_stride, int chunk_len),
           (x, stats, cols, x_stride, chunk_len))
KZ_KERNELS(softmax_chunk_write,
           (const T* __restrict__ x, T* __restrict__ y, const float2* __restrict__ stats, int cols,
            long long x_stride, int chunk_len),
           (x, y, stats, cols, x_stride, chunk_len))
