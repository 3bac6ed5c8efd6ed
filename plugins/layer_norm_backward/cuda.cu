// layer_norm backward over the rows of (rows, n) matrices of T (float, kz_half or kz_bf16): dy and x with
// column stride 1, rows dy_stride and x_stride apart; dx contiguous; mean and rstd one float per row; w of n
// elements or null (no weight). Computes in float. Per row, with x_hat = (x - mean) * rstd, g = dy * w:
//   dx = rstd * (g - c1 - x_hat * c2),   c1 = mean(g), c2 = mean(g * x_hat)
// and over the rows dw = sum(dy * x_hat), db = sum(dy), in two stages (deterministic, no atomics): each
// group of threads adds its rows into registers and writes one float partial row (part_w, part_b: slots x n);
// lnb_reduce adds the slots in a fixed order. On sm_90, after lnb_fits or lnb_cluster, it is launched as a
// programmatic dependent of the row kernel, which lets it start at once (kz_launch_dependents): its launch and
// its blocks' start overlap the row kernel, and it waits (kz_wait_prior_grids) only for the partial rows.
//
// lnb_fits: a row held in registers, ITEMS elements per thread, by one warp (group = 32) or the whole block;
//   a group takes rows slot, slot + slots, ... (slots = the groups in the grid, about two blocks per SM:
//   enough 16-byte loads in flight per thread that more occupancy buys nothing), and each block writes one
//   partial row: few to reduce — at 8192 x 8192 fp32 with 264 blocks, 17 MB against the 805 MB of dy, x
//   and dx.
// lnb_cluster (sm_90): a row of up to CLUSTER * THREADS * ITEMS elements split over a cluster of CLUSTER
//   blocks, each holding its THREADS * ITEMS columns as lnb_fits holds a row, the row sums added across the
//   cluster in distributed shared memory; a cluster takes rows slot, slot + slots, ... (slots = clusters)
//   and each of its blocks writes its columns of partial row `slot`. dy and x read once.
// lnb_row_stats + lnb_looped: longer rows. A block per row writes (c1, c2); then a block per slot of
//   consecutive rows walks the row in tiles, each tile over all its rows, so that the dw, db accumulators
//   of a tile stay in registers; dy and x are read twice.
// PREFETCH 1 (lnb_fits, lnb_cluster): a group loads its next row before this row's sums, so that those loads
//   are in flight through them; twice the registers for x and dy: a gain at short rows, a loss at long ones
//   (docs/design/rows.md), hence a config key.
// PART_CLUSTER > 1 (lnb_fits_pc, a block per row, sm_90): clusters of that many blocks add their partial rows in
//   distributed shared memory once their rows are done, and the second kernel reads a PART_CLUSTER-th of them
//   (a gain only at 8192 x 8192 with clusters of 2, a loss elsewhere; docs/design/rows.md).
// Each kernel comes as _vec (PACK elements per 16-byte access; the wrapper checks n, the row strides and
// the pointers) and _scalar.
#ifndef ITEMS
#define ITEMS 8
#endif
#ifndef PART_CLUSTER
#define PART_CLUSTER 1
#endif

#define KZ_NULLABLE_ROWS 1
#include "../_cuda/row_packs.cuh"

// part[i..i+V) = v[0..V) when i < end (float partial rows; plain stores, consecutive threads adjacent).
template <int V>
__device__ __forceinline__ void store_partial(float* __restrict__ part, int i, int end, const float* v) {
  if (i < end) {
#pragma unroll
    for (int e = 0; e < V; ++e) part[i + e] = v[e];
  }
}

#include "../_cuda/row_sums.cuh"

// ---- rows held in registers ------------------------------------------------------------------

// x and dy of one row for a thread holding ITEMS of its elements, pack k at column first + k * step (0 past the
// row: adds nothing in lnb_row).
template <int V>
__device__ __forceinline__ void lnb_load(const T* __restrict__ dy_row, const T* __restrict__ x_row, float* xv,
                                         float* dv, int first, int step, int n) {
#pragma unroll
  for (int k = 0; k < ITEMS / V; ++k) {
    load_pack<V>(x_row, first + k * step, n, xv + k * V, 0.0f);
    load_pack<V>(dy_row, first + k * step, n, dv + k * V, 0.0f);
  }
}

// One row from its loaded x and dy (xv, dv; xv is overwritten): dx stored, the thread's dw and db columns
// (aw, ab) accumulated. sum(a, c) adds (a, c) over the threads holding the row (a warp's, a block's or a
// cluster's sum).
template <int V, class Sum>
__device__ __forceinline__ void lnb_row(float* xv, const float* dv, T* __restrict__ dx_row, float m, float rs,
                                        const float* wv, float* aw, float* ab, int first, int step, int n, Sum sum) {
  float a = 0.0f, c = 0.0f;
#pragma unroll
  for (int j = 0; j < ITEMS; ++j) {
    xv[j] = (xv[j] - m) * rs;  // x_hat
    const float g = dv[j] * wv[j];
    a += g;
    c += g * xv[j];
  }
  const float2 s = sum(a, c);
  const float c1 = s.x / n, c2 = s.y / n;
  float out[ITEMS];
#pragma unroll
  for (int j = 0; j < ITEMS; ++j) {
    out[j] = rs * (dv[j] * wv[j] - c1 - xv[j] * c2);
    aw[j] += dv[j] * xv[j];
    ab[j] += dv[j];
  }
#pragma unroll
  for (int k = 0; k < ITEMS / V; ++k) store_pack<V>(dx_row, first + k * step, n, out + k * V);
}

// Rows slot, slot + slots, ... (< rows) for a thread holding ITEMS elements of each, pack k at column
// first + k * step: each row's dx stored, the thread's columns of dw and db accumulated in (aw, ab). With
// PREFETCH the next row is loaded before this row's sums, so that its loads are in flight through them.
template <int V, class Sum>
__device__ __forceinline__ void lnb_rows(const T* __restrict__ dy, const T* __restrict__ x,
                                         const float* __restrict__ mean, const float* __restrict__ rstd,
                                         T* __restrict__ dx, const float* wv, float* aw, float* ab, int rows, int n,
                                         long long dy_stride, long long x_stride, long long slot, long long slots,
                                         int first, int step, Sum sum) {
#if PREFETCH
  float xv[ITEMS], dv[ITEMS], m = 0.0f, rs = 0.0f;
  if (slot < rows) {
    lnb_load<V>(dy + slot * dy_stride, x + slot * x_stride, xv, dv, first, step, n);
    m = mean[slot], rs = rstd[slot];
  }
  for (long long row = slot; row < rows; row += slots) {
    const long long next = row + slots;
    float xn[ITEMS], dn[ITEMS], mn = 0.0f, rn = 0.0f;
    if (next < rows) {
      lnb_load<V>(dy + next * dy_stride, x + next * x_stride, xn, dn, first, step, n);
      mn = mean[next], rn = rstd[next];
    }
    lnb_row<V>(xv, dv, dx + row * n, m, rs, wv, aw, ab, first, step, n, sum);
#pragma unroll
    for (int j = 0; j < ITEMS; ++j) xv[j] = xn[j], dv[j] = dn[j];
    m = mn, rs = rn;
  }
#else
  for (long long row = slot; row < rows; row += slots) {
    float xv[ITEMS], dv[ITEMS];
    lnb_load<V>(dy + row * dy_stride, x + row * x_stride, xv, dv, first, step, n);
    lnb_row<V>(xv, dv, dx + row * n, mean[row], rstd[row], wv, aw, ab, first, step, n, sum);
  }
#endif
}

#if __CUDA_ARCH__ >= 900
// For lnb_fits_pc (a block per row, clusters of PART_CLUSTER blocks): the cluster's blocks add their partial
// rows in distributed shared memory and write one, partial row blockIdx.x / PART_CLUSTER; block `rank` adds
// and writes the rank-th PART_CLUSTER-th of the columns, the blocks' values in rank order. part_s: dynamic
// shared memory of 2 * ITEMS * blockDim.x floats (aw's columns, then ab's).
template <int V>
__device__ __forceinline__ void add_cluster_partials(const float* aw, const float* ab, float* __restrict__ part_w,
                                                     float* __restrict__ part_b, int n) {
  extern __shared__ float2 part_s2[];
  float* part_s = reinterpret_cast<float*>(part_s2);
  const int width = ITEMS * blockDim.x;  // the columns a block holds (>= n; a multiple of 32)
#pragma unroll
  for (int k = 0; k < ITEMS / V; ++k) {
#pragma unroll
    for (int e = 0; e < V; ++e) {
      const int col = (k * (int)blockDim.x + (int)threadIdx.x) * V + e;
      part_s[col] = aw[k * V + e];
      part_s[width + col] = ab[k * V + e];
    }
  }
  cluster_barrier();
  const int share = width / PART_CLUSTER;  // float2 pairs a block adds, of the 2 * width floats
  const int rank = (int)cluster_rank();
  const long long out = blockIdx.x / PART_CLUSTER * (long long)n;
  for (int p = threadIdx.x; p < share; p += blockDim.x) {
    const int pair = rank * share + p, which = pair * 2 >= width, col = pair * 2 - which * width;
    const float2 s = sum_over_cluster<PART_CLUSTER>(part_s2 + pair);
    float* dst = (which ? part_b : part_w) + out;
    if (col < n) dst[col] = s.x;
    if (col + 1 < n) dst[col + 1] = s.y;
  }
  cluster_barrier();  // no block exits while another may still read its shared memory
}
#endif

// Thread `lane` of a group of `group` threads holds ITEMS elements of a row: packs k * group + lane
// (k < ITEMS / V). group * ITEMS >= n. Slot = the group's index in the grid; the block owns partial row
// blockIdx.x, or with CLUSTERED (a block per row, sm_90) its cluster owns partial row blockIdx.x / PART_CLUSTER.
template <int V, bool CLUSTERED = false>
__device__ __forceinline__ void lnb_fits(const T* __restrict__ dy, const T* __restrict__ x,
                                         const float* __restrict__ mean, const float* __restrict__ rstd,
                                         const T* __restrict__ w, T* __restrict__ dx, float* __restrict__ part_w,
                                         float* __restrict__ part_b, int rows, int n, long long dy_stride,
                                         long long x_stride, int group) {
  kz_launch_dependents();
  __shared__ float2 red[33];
  const int lane = threadIdx.x % group, groups = blockDim.x / group;
  const long long slot = (long long)blockIdx.x * groups + threadIdx.x / group;
  const long long slots = (long long)gridDim.x * groups;
  float wv[ITEMS], aw[ITEMS], ab[ITEMS];
#pragma unroll
  for (int k = 0; k < ITEMS / V; ++k) load_pack<V>(w, (k * group + lane) * V, n, wv + k * V, 1.0f);
#pragma unroll
  for (int j = 0; j < ITEMS; ++j) aw[j] = ab[j] = 0.0f;
  // for group = blockDim.x every thread of the block takes the same rows: the barriers below are uniform
  const auto sum = [&](float sa, float sc) {
    return group == 32 ? make_float2(warp_sum(sa), warp_sum(sc)) : block_sum2(sa, sc, red);
  };
  lnb_rows<V>(dy, x, mean, rstd, dx, wv, aw, ab, rows, n, dy_stride, x_stride, slot, slots, lane * V, group * V,
              sum);
  if (groups == 1) {
#if __CUDA_ARCH__ >= 900
    if constexpr (CLUSTERED) {
      add_cluster_partials<V>(aw, ab, part_w, part_b, n);
      return;
    }
#endif
#pragma unroll
    for (int k = 0; k < ITEMS / V; ++k) {
      const int i = (k * group + lane) * V;
      store_partial<V>(part_w + blockIdx.x * (long long)n, i, n, aw + k * V);
      store_partial<V>(part_b + blockIdx.x * (long long)n, i, n, ab + k * V);
    }
    return;
  }
  // A warp per row: the block's warps add their partial rows in shared memory, in warp order, and the block
  // writes one partial row (a partial row per warp would be as many bytes as the rows themselves at n = 1024).
  __shared__ float sum_w[32 * ITEMS], sum_b[32 * ITEMS];
  for (int g = 0; g < groups; ++g) {
    if (threadIdx.x / 32 == g) {
#pragma unroll
      for (int j = 0; j < ITEMS; ++j) {
        const int i = ((j / V) * 32 + lane) * V + j % V;
        sum_w[i] = g == 0 ? aw[j] : sum_w[i] + aw[j];
        sum_b[i] = g == 0 ? ab[j] : sum_b[i] + ab[j];
      }
    }
    __syncthreads();
  }
  for (int i = threadIdx.x; i < n; i += blockDim.x) {
    part_w[blockIdx.x * (long long)n + i] = sum_w[i];
    part_b[blockIdx.x * (long long)n + i] = sum_b[i];
  }
}

// ---- rows split over a cluster (sm_90) -------------------------------------------------------------

#if __CUDA_ARCH__ >= 900
// Cluster `slot` = blockIdx.x / CLUSTER takes rows slot, slot + slots, ...; its block `rank` (blockDim.x =
// THREADS) holds the columns from rank * THREADS * ITEMS on, laid out as lnb_fits lays out a row, and owns
// those columns of partial row `slot`. CLUSTER * THREADS * ITEMS >= n.
template <int V>
__device__ __forceinline__ void lnb_cluster(const T* __restrict__ dy, const T* __restrict__ x,
                                            const float* __restrict__ mean, const float* __restrict__ rstd,
                                            const T* __restrict__ w, T* __restrict__ dx, float* __restrict__ part_w,
                                            float* __restrict__ part_b, int rows, int n, long long dy_stride,
                                            long long x_stride) {
  kz_launch_dependents();
  __shared__ float2 red[33], slot_sums[2];
  int phase = 0;
  const int col0 = (int)cluster_rank() * THREADS * ITEMS, lane = threadIdx.x;
  const long long slot = blockIdx.x / CLUSTER, slots = gridDim.x / CLUSTER;
  float wv[ITEMS], aw[ITEMS], ab[ITEMS];
#pragma unroll
  for (int k = 0; k < ITEMS / V; ++k) load_pack<V>(w, col0 + (k * THREADS + lane) * V, n, wv + k * V, 1.0f);
#pragma unroll
  for (int j = 0; j < ITEMS; ++j) aw[j] = ab[j] = 0.0f;
  lnb_rows<V>(dy, x, mean, rstd, dx, wv, aw, ab, rows, n, dy_stride, x_stride, slot, slots, col0 + lane * V,
              THREADS * V, [&](float sa, float sc) { return cluster_sum2(sa, sc, red, slot_sums, phase); });
#pragma unroll
  for (int k = 0; k < ITEMS / V; ++k) {
    const int i = col0 + (k * THREADS + lane) * V;
    store_partial<V>(part_w + slot * n, i, n, aw + k * V);
    store_partial<V>(part_b + slot * n, i, n, ab + k * V);
  }
  cluster_barrier();  // the other blocks may still read this block's slot sums
}
#endif

// ---- long rows -----------------------------------------------------------------------------------

// One block per row (grid = rows): stats[row] = (c1, c2).
template <int V>
__device__ __forceinline__ void lnb_row_stats(const T* __restrict__ dy, const T* __restrict__ x,
                                              const float* __restrict__ mean, const float* __restrict__ rstd,
                                              const T* __restrict__ w, float2* __restrict__ stats, int n,
                                              long long dy_stride, long long x_stride) {
  __shared__ float2 red[33];
  const long long row = blockIdx.x;
  const float m = mean[row], rs = rstd[row];
  const int tile = blockDim.x * ITEMS;
  float a = 0.0f, c = 0.0f;
  for (int base = 0; base < n; base += tile) {
    float xv[ITEMS], dv[ITEMS], wv[ITEMS];
#pragma unroll
    for (int k = 0; k < ITEMS / V; ++k) {
      const int i = base + (k * (int)blockDim.x + (int)threadIdx.x) * V;
      load_pack<V>(x + row * x_stride, i, n, xv + k * V, 0.0f);
      load_pack<V>(dy + row * dy_stride, i, n, dv + k * V, 0.0f);
      load_pack<V>(w, i, n, wv + k * V, 1.0f);
    }
#pragma unroll
    for (int j = 0; j < ITEMS; ++j) {
      const float g = dv[j] * wv[j];
      a += g;
      c += g * ((xv[j] - m) * rs);
    }
  }
  const float2 s = block_sum2(a, c, red);
  if (threadIdx.x == 0) stats[row] = make_float2(s.x / n, s.y / n);
}

// One block per slot of rows [slot * rows_per_slot, + rows_per_slot): each tile of the row over all of them.
template <int V>
__device__ __forceinline__ void lnb_looped(const T* __restrict__ dy, const T* __restrict__ x,
                                           const float* __restrict__ mean, const float* __restrict__ rstd,
                                           const T* __restrict__ w, const float2* __restrict__ stats,
                                           T* __restrict__ dx, float* __restrict__ part_w,
                                           float* __restrict__ part_b, int rows, int n, long long dy_stride,
                                           long long x_stride, int rows_per_slot) {
  const long long slot = blockIdx.x;
  const long long r0 = slot * rows_per_slot;
  const long long r1 = min((long long)rows, r0 + rows_per_slot);
  const int tile = blockDim.x * ITEMS;
  for (int base = 0; base < n; base += tile) {
    float wv[ITEMS], aw[ITEMS], ab[ITEMS];
#pragma unroll
    for (int k = 0; k < ITEMS / V; ++k)
      load_pack<V>(w, base + (k * (int)blockDim.x + (int)threadIdx.x) * V, n, wv + k * V, 1.0f);
#pragma unroll
    for (int j = 0; j < ITEMS; ++j) aw[j] = ab[j] = 0.0f;
    for (long long row = r0; row < r1; ++row) {
      float xv[ITEMS], dv[ITEMS];
#pragma unroll
      for (int k = 0; k < ITEMS / V; ++k) {
        const int i = base + (k * (int)blockDim.x + (int)threadIdx.x) * V;
        load_pack<V>(x + row * x_stride, i, n, xv + k * V, 0.0f);
        load_pack<V>(dy + row * dy_stride, i, n, dv + k * V, 0.0f);
      }
      const float m = mean[row], rs = rstd[row];
      const float2 c = stats[row];
      float out[ITEMS];
#pragma unroll
      for (int j = 0; j < ITEMS; ++j) {
        const float xh = (xv[j] - m) * rs;
        out[j] = rs * (dv[j] * wv[j] - c.x - xh * c.y);
        aw[j] += dv[j] * xh;
        ab[j] += dv[j];
      }
#pragma unroll
      for (int k = 0; k < ITEMS / V; ++k)
        store_pack<V>(dx + row * n, base + (k * (int)blockDim.x + (int)threadIdx.x) * V, n, out + k * V);
    }
#pragma unroll
    for (int k = 0; k < ITEMS / V; ++k) {
      const int i = base + (k * (int)blockDim.x + (int)threadIdx.x) * V;
      store_partial<V>(part_w + slot * n, i, n, aw + k * V);
      store_partial<V>(part_b + slot * n, i, n, ab + k * V);
    }
  }
}

// ---- entry points ------------------------------------------------------------------------------

#define KZ_KERNELS_WITH(attrs, name, params, args)                                                  \
  extern "C" __global__ void attrs __launch_bounds__(THREADS) name##_vec params { name<PACK> args; }   \
  extern "C" __global__ void attrs __launch_bounds__(THREADS) name##_scalar params { name<1> args; }
#define KZ_KERNELS(name, params, args) KZ_KERNELS_WITH(, name, params, args)

KZ_KERNELS(lnb_fits,
           (const T* __restrict__ dy, const T* __restrict__ x, const float* __restrict__ mean,
            const float* __restrict__ rstd, const T* __restrict__ w, T* __restrict__ dx, float* __restrict__ part_w,
            float* __restrict__ part_b, int rows, int n, long long dy_stride, long long x_stride, int group),
           (dy, x, mean, rstd, w, dx, part_w, part_b, rows, n, dy_stride, x_stride, group))
#if __CUDA_ARCH__ >= 900
template <int V>
__device__ __forceinline__ void lnb_fits_pc(const T* __restrict__ dy, const T* __restrict__ x,
                                            const float* __restrict__ mean, const float* __restrict__ rstd,
                                            const T* __restrict__ w, T* __restrict__ dx, float* __restrict__ part_w,
                                            float* __restrict__ part_b, int rows, int n, long long dy_stride,
                                            long long x_stride, int group) {
  lnb_fits<V, true>(dy, x, mean, rstd, w, dx, part_w, part_b, rows, n, dy_stride, x_stride, group);
}
KZ_KERNELS_WITH(__cluster_dims__(PART_CLUSTER, 1, 1), lnb_fits_pc,
                (const T* __restrict__ dy, const T* __restrict__ x, const float* __restrict__ mean,
                 const float* __restrict__ rstd, const T* __restrict__ w, T* __restrict__ dx,
                 float* __restrict__ part_w, float* __restrict__ part_b, int rows, int n, long long dy_stride,
                 long long x_stride, int group),
                (dy, x, mean, rstd, w, dx, part_w, part_b, rows, n, dy_stride, x_stride, group))
KZ_KERNELS_WITH(__cluster_dims__(CLUSTER, 1, 1), lnb_cluster,
                (const T* __restrict__ dy, const T* __restrict__ x, const float* __restrict__ mean,
                 const float* __restrict__ rstd, const T* __restrict__ w, T* __restrict__ dx,
                 float* __restrict__ part_w, float* __restrict__ part_b, int rows, int n, long long dy_stride,
                 long long x_stride),
                (dy, x, mean, rstd, w, dx, part_w, part_b, rows, n, dy_stride, x_stride))
#endif
KZ_KERNELS(lnb_row_stats,
           (const T* __restrict__ dy, const T* __restrict__ x, const float* __restrict__ mean,
            const float* __restrict__ rstd, const T* __restrict__ w, float2* __restrict__ stats, int n,
            long long dy_stride, long long x_stride),
           (dy, x, mean, rstd, w, stats, n, dy_stride, x_stride))
KZ_KERNELS(lnb_looped,
           (const T* __restrict__ dy, const T* __restrict__ x, const float* __restrict__ mean,
            const float* __restrict__ rstd, const T* __restrict__ w, const float2* __restrict__ stats,
            T* __restrict__ dx, float* __restrict__ part_w, float* __restrict__ part_b, int rows, int n,
            long long dy_stride, long long x_stride, int rows_per_slot),
           (dy, x, mean, rstd, w, stats, dx, part_w, part_b, rows, n, dy_stride, x_stride, rows_per_slot))

// Stage 2: dw[c] = sum over slots of part_w[s][c] (blockIdx.y = 0), db[c] likewise (blockIdx.y = 1).
// Block (cols, lanes), 512 threads, lanes a power of two: cols adjacent columns (coalesced), `lanes` threads
// per column each adding every lanes-th slot, four loads in flight, then a tree over the lanes in a fixed
// order. The wrapper gives more lanes to more slots (a few hundred slots of a short row are otherwise a long
// serial chain per thread) and fewer to few (a tree over idle lanes costs more than the sums, at long rows).
// No sums past n (slots may be 0: the sums of no rows are 0).
extern "C" __global__ void __launch_bounds__(512) lnb_reduce(const float* __restrict__ part_w,
                                                             const float* __restrict__ part_b, T* __restrict__ dw,
                                                             T* __restrict__ db, int slots, int n) {
  __shared__ float red[512 + 32];  // [lanes][cols + 1]
  const int cols = blockDim.x, lanes = blockDim.y, pitch = cols + 1;
  const int col = blockIdx.x * cols + threadIdx.x;
  const float* part = (blockIdx.y == 0 ? part_w : part_b) + col;
  float s[4] = {0.0f, 0.0f, 0.0f, 0.0f};
  kz_wait_prior_grids();  // for the row kernel's partial rows
  if (col < n) {
    int k = threadIdx.y;
    for (; k + 3 * lanes < slots; k += 4 * lanes) {
#pragma unroll
      for (int u = 0; u < 4; ++u) s[u] += part[(long long)(k + u * lanes) * n];
    }
    for (; k < slots; k += lanes) s[0] += part[(long long)k * n];
  }
  red[threadIdx.y * pitch + threadIdx.x] = (s[0] + s[1]) + (s[2] + s[3]);
  __syncthreads();
  for (int half = lanes / 2; half > 0; half >>= 1) {
    if (threadIdx.y < half) red[threadIdx.y * pitch + threadIdx.x] += red[(threadIdx.y + half) * pitch + threadIdx.x];
    __syncthreads();
  }
  if (threadIdx.y == 0 && col < n) (blockIdx.y == 0 ? dw : db)[col] = kz_from_float<T>(red[threadIdx.x]);
}
