// layer_norm forward over the rows of a (rows, n) matrix of T (float, kz_half or kz_bf16): column stride 1,
// rows x_stride apart; y contiguous; mean and rstd one float per row. Computes in float.
//
// ln_fits: a row held in registers, ITEMS elements per thread, by one warp (group = 32, several rows per
//   block) or by the whole block (group = blockDim.x): x read once, y written once (the floor's traffic:
//   8192 x 8192 fp32 is 537 MB, 0.179 ms at 3.0 TB/s). The mean, then the variance of the deviations held
//   in registers (two-pass: exact, no cancellation), each a shuffle (and shared-memory) reduction. A warp or
//   block takes one row (a grid of every row) or walks several (a grid of a few blocks per SM); with PREFETCH
//   it loads its next row before this row's sums, which wins at short rows (docs/design/rows.md).
// ln_cluster (sm_90): a row of up to CLUSTER * THREADS * ITEMS elements split over a cluster of CLUSTER
//   blocks, each holding its THREADS * ITEMS columns in registers as ln_fits does; each block's count, mean
//   and squared deviations meet once in distributed shared memory (Chan's combination). x still read once:
//   1024 x 65536 fp32 is 256 KiB a row, more than one block holds, and ln_looped's second read misses L2
//   there (rows in flight x 256 KiB > L2).
//   A cluster per row: persistent clusters loading the next row during this row's sums measured slower, and
//   so did persistent clusters streaming the rows through shared memory by bulk copies (docs/design/rows.md).
// ln_looped: a longer row by one block, twice: shifted sums s1 = sum(x - K), s2 = sum((x - K)^2) with
//   K = x[0] (one pass, and no cancellation when the mean is far from 0), then y; the second read mostly
//   hits L2.
// Each kernel comes as _vec (PACK elements per 16-byte access; the wrapper checks that n, the row stride
// and every pointer allow it) and _scalar (one element per access). A row holding inf or NaN gets a NaN
// variance; its mean is made NaN too, as torch's Welford mean is.
#ifndef ITEMS
#define ITEMS 8
#endif

#include "../_cuda/row_packs.cuh"

#include "../_cuda/row_sums.cuh"

// Sums over a group: the warp (group 32) or the block.
__device__ __forceinline__ float2 group_sum2(float a, float b, int group, float2* red) {
  if (group == 32) return make_float2(warp_sum(a), warp_sum(b));
  return block_sum2(a, b, red);
}

// y[0..V) = y * w + b for the V columns from i (w, b may be null: no weight, no bias).
template <int V>
__device__ __forceinline__ void affine(float* y, const T* __restrict__ w, const T* __restrict__ b, int i, int n) {
  float t[V];
  if (w != nullptr) {
    load_pack<V>(w, i, n, t, 0.0f);
#pragma unroll
    for (int e = 0; e < V; ++e) y[e] *= t[e];
  }
  if (b != nullptr) {
    load_pack<V>(b, i, n, t, 0.0f);
#pragma unroll
    for (int e = 0; e < V; ++e) y[e] += t[e];
  }
}

__device__ __forceinline__ void write_stats(float* mean_out, float* rstd_out, long long row, float mean, float var,
                                            float eps) {
  mean_out[row] = var != var ? __int_as_float(0x7fc00000) : mean;
  rstd_out[row] = 1.0f / sqrtf(var + eps);
}

// ---- rows held in registers ------------------------------------------------------------------

// The sum of a thread's ITEMS slots (those past the row hold 0).
__device__ __forceinline__ float slots_sum(const float* v) {
  float s = 0.0f;
#pragma unroll
  for (int j = 0; j < ITEMS; ++j) s += v[j];
  return s;
}

// v -= mean over a thread's slots (pack k at column first + k * step); returns the sum of the squared
// deviations of the slots inside the row.
template <int V>
__device__ __forceinline__ float center(float* v, float mean, int first, int step, int n) {
  float q = 0.0f;
#pragma unroll
  for (int j = 0; j < ITEMS; ++j) {
    const int col = first + (j / V) * step + j % V;
    v[j] -= mean;
    if (col < n) q += v[j] * v[j];
  }
  return q;
}

// The thread's ITEMS elements of row xr, pack k at column first + k * step (0 past the row's end).
template <int V>
__device__ __forceinline__ void load_row(const T* __restrict__ xr, float* v, int first, int step, int n) {
#pragma unroll
  for (int k = 0; k < ITEMS / V; ++k) load_pack<V>(xr, first + k * step, n, v + k * V, 0.0f);
}

// One row for a thread holding ITEMS of its elements in v (load_row's layout): the mean, then the variance of
// the deviations held in registers, each added over the threads holding the row by sum(a, b) (a warp's, a
// block's or a cluster's); y stored. Returns (mean, var).
template <int V, class Sum>
__device__ __forceinline__ float2 ln_row(float* v, const T* __restrict__ w, const T* __restrict__ b,
                                         T* __restrict__ yr, int first, int step, int n, float eps, Sum sum) {
  const float mean = sum(slots_sum(v), 0.0f).x / n;
  const float var = sum(center<V>(v, mean, first, step, n), 0.0f).x / n;
  const float rstd = 1.0f / sqrtf(var + eps);
#pragma unroll
  for (int k = 0; k < ITEMS / V; ++k) {
    const int i = first + k * step;
#pragma unroll
    for (int e = 0; e < V; ++e) v[k * V + e] *= rstd;
    affine<V>(v + k * V, w, b, i, n);
    store_pack<V>(yr, i, n, v + k * V);
  }
  return make_float2(mean, var);
}

// Thread `lane` of a group of `group` threads holds ITEMS elements of a row: packs k * group + lane
// (k < ITEMS / V), so consecutive threads read consecutive packs. group * ITEMS >= n. A group takes rows
// slot, slot + slots, ... (slot = its index in the grid, slots = the groups in the grid); with PREFETCH it
// loads its next row before this row's sums, so that those loads are in flight through them.
template <int V>
__device__ __forceinline__ void ln_fits(const T* __restrict__ x, const T* __restrict__ w, const T* __restrict__ b,
                                        T* __restrict__ y, float* __restrict__ mean_out,
                                        float* __restrict__ rstd_out, int rows, int n, long long x_stride, int group,
                                        float eps) {
  __shared__ float2 red[33];
  const int lane = threadIdx.x % group, groups = blockDim.x / group;
  const long long slot = (long long)blockIdx.x * groups + threadIdx.x / group;
  const long long slots = (long long)gridDim.x * groups;
  if (slot >= rows) return;  // whole warps only (group 32); for group = blockDim.x the whole block
  const auto sum = [&](float sa, float sb) { return group_sum2(sa, sb, group, red); };
  const int first = lane * V, step = group * V;
  float v[ITEMS];
  load_row<V>(x + slot * x_stride, v, first, step, n);
  for (long long row = slot; row < rows; row += slots) {
#if PREFETCH
    float next[ITEMS];
    if (row + slots < rows) load_row<V>(x + (row + slots) * x_stride, next, first, step, n);
#endif
    const float2 stats = ln_row<V>(v, w, b, y + row * n, first, step, n, eps, sum);
    if (lane == 0) write_stats(mean_out, rstd_out, row, stats.x, stats.y, eps);
    if (row + slots < rows) {
#if PREFETCH
#pragma unroll
      for (int j = 0; j < ITEMS; ++j) v[j] = next[j];
#else
      load_row<V>(x + (row + slots) * x_stride, v, first, step, n);
#endif
    }
  }
}

// ---- rows split over a cluster (sm_90) -------------------------------------------------------------

#if __CUDA_ARCH__ >= 900
// The row blockIdx.x / CLUSTER; block `rank` of its cluster (blockDim.x = THREADS) holds the columns from
// rank * THREADS * ITEMS on, its packs laid out as ln_fits lays out a row. CLUSTER * THREADS * ITEMS >= n.
// Each block takes the count, mean and sum of squared deviations of its own columns (two block sums over
// its registers); the blocks' triples meet once in distributed shared memory and are combined in rank order
// by Chan's formula, so every block holds the same mean and variance. One cluster barrier on the way, and
// the one before exit split around the stores (cluster_arrive, cluster_wait).
template <int V>
__device__ __forceinline__ void ln_cluster(const T* __restrict__ x, const T* __restrict__ w,
                                           const T* __restrict__ b, T* __restrict__ y, float* __restrict__ mean_out,
                                           float* __restrict__ rstd_out, int n, long long x_stride, float eps) {
  __shared__ float2 red[33], block_stats;
  constexpr int PER_BLOCK = THREADS * ITEMS;
  const int rank = (int)cluster_rank();
  const long long row = blockIdx.x / CLUSTER;
  const int first = rank * PER_BLOCK + (int)threadIdx.x * V, step = THREADS * V;
  float v[ITEMS];
  load_row<V>(x + row * x_stride, v, first, step, n);
  const int count = min(max(n - rank * PER_BLOCK, 0), PER_BLOCK);  // this block's columns
  const float block_sum = block_sum2(slots_sum(v), 0.0f, red).x;
  const float local_mean = count > 0 ? block_sum / count : 0.0f;
  const float block_m2 = block_sum2(center<V>(v, local_mean, first, step, n), 0.0f, red).x;
  if (threadIdx.x == 0) block_stats = make_float2(local_mean, block_m2);
  cluster_barrier();
  // Warp 0 gathers the blocks' (mean, m2), a lane each, and combines them; the block reads the result from
  // red[32] (written after the cluster barrier, which every thread passes after reading block_sum2's).
  // (Every thread loading all CLUSTER of them was slower: docs/design/rows.md.)
  if (threadIdx.x < 32) {
    const float2 mine = gather_cluster(&block_stats);
    float mean = 0.0f, m2 = 0.0f;
    int total = 0;
#pragma unroll
    for (int r = 0; r < CLUSTER; ++r) {
      const int c = min(max(n - r * PER_BLOCK, 0), PER_BLOCK);
      if (c == 0) break;  // the blocks past the row's end hold nothing (and every later one too)
      const float other_mean = __shfl_sync(0xffffffffu, mine.x, r), other_m2 = __shfl_sync(0xffffffffu, mine.y, r);
      const int sum_count = total + c;
      const float delta = other_mean - mean;
      mean += delta * ((float)c / (float)sum_count);
      m2 += other_m2 + delta * delta * ((float)total * (float)c / (float)sum_count);
      total = sum_count;
    }
    if (threadIdx.x == 0) red[32] = make_float2(mean, m2);
  }
  __syncthreads();
  const float mean = red[32].x, m2 = red[32].y;
  cluster_arrive();  // the others' stats are read: they may exit once every block has arrived
  const float var = m2 / n;
  const float rstd = 1.0f / sqrtf(var + eps), shift = local_mean - mean;  // v holds x - local_mean
  T* yr = y + row * n;
#pragma unroll
  for (int k = 0; k < ITEMS / V; ++k) {
    const int i = first + k * step;
#pragma unroll
    for (int e = 0; e < V; ++e) v[k * V + e] = (v[k * V + e] + shift) * rstd;
    affine<V>(v + k * V, w, b, i, n);
    store_pack<V>(yr, i, n, v + k * V);
  }
  if (rank == 0 && threadIdx.x == 0) write_stats(mean_out, rstd_out, row, mean, var, eps);
  cluster_wait();  // no block exits while another may still read its stats
}
#endif

// ---- long rows: shifted sums, then a second pass ------------------------------------------------

// One block per row (grid = rows); tiles of blockDim.x * ITEMS elements.
template <int V>
__device__ __forceinline__ void ln_looped(const T* __restrict__ x, const T* __restrict__ w, const T* __restrict__ b,
                                          T* __restrict__ y, float* __restrict__ mean_out,
                                          float* __restrict__ rstd_out, int n, long long x_stride, float eps) {
  __shared__ float2 red[33];
  const long long row = blockIdx.x;
  const T* xr = x + row * x_stride;
  const float k0 = kz_to_float(xr[0]);
  const int tile = blockDim.x * ITEMS;
  float s1 = 0.0f, s2 = 0.0f;
  for (int base = 0; base < n; base += tile) {
    float v[ITEMS];
#pragma unroll
    for (int k = 0; k < ITEMS / V; ++k)
      load_pack<V>(xr, base + (k * (int)blockDim.x + (int)threadIdx.x) * V, n, v + k * V, k0);  // past n: d = 0
#pragma unroll
    for (int j = 0; j < ITEMS; ++j) {
      const float d = v[j] - k0;
      s1 += d;
      s2 += d * d;
    }
  }
  const float2 s = block_sum2(s1, s2, red);
  const float shift = s.x / n;
  float var = s.y / n - shift * shift;
  if (var < 0.0f) var = 0.0f;  // a tiny negative from rounding; NaN stays NaN
  const float mean = k0 + shift, rstd = 1.0f / sqrtf(var + eps);
  if (threadIdx.x == 0) write_stats(mean_out, rstd_out, row, mean, var, eps);
  T* yr = y + row * n;
  for (int base = 0; base < n; base += tile) {
    float v[ITEMS];
#pragma unroll
    for (int k = 0; k < ITEMS / V; ++k)
      load_pack<V>(xr, base + (k * (int)blockDim.x + (int)threadIdx.x) * V, n, v + k * V, 0.0f);
#pragma unroll
    for (int k = 0; k < ITEMS / V; ++k) {
      const int i = base + (k * (int)blockDim.x + (int)threadIdx.x) * V;
#pragma unroll
      for (int e = 0; e < V; ++e) v[k * V + e] = (v[k * V + e] - mean) * rstd;
      affine<V>(v + k * V, w, b, i, n);
      store_pack<V>(yr, i, n, v + k * V);
    }
  }
}

// ---- entry points: each body for 16-byte packs (_vec) and for single elements (_scalar) ----------

#define KZ_BOUNDS THREADS  // __launch_bounds__'s arguments for the kernels defined next
#define KZ_KERNELS_WITH(attrs, name, params, args)                                                    \
  extern "C" __global__ void attrs __launch_bounds__(KZ_BOUNDS) name##_vec params { name<PACK> args; }   \
  extern "C" __global__ void attrs __launch_bounds__(KZ_BOUNDS) name##_scalar params { name<1> args; }
#define KZ_KERNELS(name, params, args) KZ_KERNELS_WITH(, name, params, args)

KZ_KERNELS(ln_fits,
           (const T* __restrict__ x, const T* __restrict__ w, const T* __restrict__ b, T* __restrict__ y,
            float* __restrict__ mean, float* __restrict__ rstd, int rows, int n, long long x_stride, int group,
            float eps),
           (x, w, b, y, mean, rstd, rows, n, x_stride, group, eps))
#if __CUDA_ARCH__ >= 900
// Blocks of the cluster kernel per SM that its registers must allow (of the SM's 65536): a thread's registers
// are the most of 32, 24 more than the elements it holds, and twice those (32 at 8 elements, 40 at 16, 64 at
// 32; ptxas -v through NVRTC 13 for sm_90: no spill but 4 bytes at 8 and in the scalar kernels). Without it ptxas took 2 registers past the step
// that keeps one more block per SM at 256 x 32 (66 registers, 3 blocks) and 1024 x 8 (34, 1 block), and those
// configs lost a fifth to a third of their speed (docs/design/rows.md).
constexpr int CLUSTER_REGISTERS = ITEMS + 24 > 2 * ITEMS ? (ITEMS + 24 > 32 ? ITEMS + 24 : 32) : 2 * ITEMS;
constexpr int CLUSTER_MIN_BLOCKS =
    65536 / (THREADS * CLUSTER_REGISTERS) > 0 ? 65536 / (THREADS * CLUSTER_REGISTERS) : 1;
#undef KZ_BOUNDS
#define KZ_BOUNDS THREADS, CLUSTER_MIN_BLOCKS
KZ_KERNELS_WITH(__cluster_dims__(CLUSTER, 1, 1), ln_cluster,
                (const T* __restrict__ x, const T* __restrict__ w, const T* __restrict__ b, T* __restrict__ y,
                 float* __restrict__ mean, float* __restrict__ rstd, int n, long long x_stride, float eps),
                (x, w, b, y, mean, rstd, n, x_stride, eps))
#undef KZ_BOUNDS
#define KZ_BOUNDS THREADS
#endif
KZ_KERNELS(ln_looped,
           (const T* __restrict__ x, const T* __restrict__ w, const T* __restrict__ b, T* __restrict__ y,
            float* __restrict__ mean, float* __restrict__ rstd, int n, long long x_stride, float eps),
           (x, w, b, y, mean, rstd, n, x_stride, eps))
