// cross_entropy forward over the rows of a (rows, c) matrix of logits of T (float, kz_half or kz_bf16):
// class stride 1, rows x_stride apart. One block per row walks it once, each thread keeping an online max
// m, a rescaled sum s of exp(x - m) and (label smoothing) a sum of the logits; the block merges them, and
// thread 0 reads the target's logit and writes lse and the row's loss. Nothing of the row's size is
// written: one read of the logits is the traffic (8192 x 50257 fp32: 1.65 GB, 0.55 ms at 3.0 TB/s).
//
// Rows need not be 16-byte aligned (c = 50257 is odd): each row is split into a head of up to PACK - 1
// elements before its first 16-byte boundary, a body of 16-byte packs, and a tail; head and tail go one
// element per thread.
// Each step of the body, a thread loads ITEMS elements (ITEMS / PACK packs, blockDim.x packs apart) before
// it computes, takes their max first and rescales its sum once: one __expf per logit, plus one per step.
//
// NaN and inf follow torch's log_softmax: fmaxf ignores NaN but exp(NaN - m) makes the sum NaN; a max of
// +inf gives exp(inf - inf) = NaN; a row of only -inf gets lse NaN (set explicitly: its sum is 0).
// __expf (ex2.approx) is within 2 ulp near 0 and its error grows only where the result is tiny.

#include "../_cuda/row_packs.cuh"

struct Online {  // a running max, the sum of exp(x - max), and the sum of x
  float m, s, sx;

  __device__ __forceinline__ void add(float x) {
    const float m_new = fmaxf(m, x);
    const float m_safe = m_new == -KZ_INF ? 0.0f : m_new;  // all -inf so far: exps of -inf, not NaN
    s = s * __expf(m - m_safe) + __expf(x - m_safe);
    sx += x;
    m = m_new;
  }

  __device__ __forceinline__ void merge(const Online& o) {
    const float m_new = fmaxf(m, o.m);
    const float m_safe = m_new == -KZ_INF ? 0.0f : m_new;
    s = s * __expf(m - m_safe) + o.s * __expf(o.m - m_safe);
    sx += o.sx;
    m = m_new;
  }
};

__device__ __forceinline__ Online shfl_xor(const Online& a, int o) {
  return Online{__shfl_xor_sync(0xffffffffu, a.m, o), __shfl_xor_sync(0xffffffffu, a.s, o),
                __shfl_xor_sync(0xffffffffu, a.sx, o)};
}

// The whole block's state, in thread 0 (others: their warp's). red: 32 Online of shared memory.
__device__ __forceinline__ Online block_merge(Online a, Online* red) {
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) a.merge(shfl_xor(a, o));
  if (lane == 0) red[warp] = a;
  __syncthreads();
  if (warp == 0) {
    a = lane < (int)(blockDim.x >> 5) ? red[lane] : Online{-KZ_INF, 0.0f, 0.0f};
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) a.merge(shfl_xor(a, o));
  }
  return a;
}

// This thread's state over row[0, c): head and tail elements one per thread, the body in V-element packs.
template <int V>
__device__ __forceinline__ Online row_state(const T* __restrict__ xr, int c) {
  Online st{-KZ_INF, 0.0f, 0.0f};
  const int head = V > 1 ? min(c, (int)(((16u - (unsigned)((size_t)xr & 15u)) & 15u) / sizeof(T))) : 0;
  const int packs = (c - head) / V, tail = head + packs * V;
  if ((int)threadIdx.x < head) st.add(kz_to_float(xr[threadIdx.x]));
  if ((int)threadIdx.x < c - tail) st.add(kz_to_float(xr[tail + threadIdx.x]));
  const typename Pack<V>::Raw* body = reinterpret_cast<const typename Pack<V>::Raw*>(xr + head);
  constexpr int K = ITEMS / V;
  for (int base = 0; base < packs; base += (int)blockDim.x * K) {
    float v[ITEMS];
    float local = -KZ_INF, sum = 0.0f;
#pragma unroll
    for (int k = 0; k < K; ++k) {
      const int p = base + k * (int)blockDim.x + (int)threadIdx.x;
      Pack<V> q;
      if (p < packs) {
        q.raw = body[p];
#pragma unroll
        for (int e = 0; e < V; ++e) {
          v[k * V + e] = kz_to_float(q.v[e]);
          sum += v[k * V + e];
        }
      } else {
#pragma unroll
        for (int e = 0; e < V; ++e) v[k * V + e] = -KZ_INF;
      }
    }
#pragma unroll
    for (int j = 0; j < ITEMS; ++j) local = fmaxf(local, v[j]);
    const float m_new = fmaxf(st.m, local);
    const float m_safe = m_new == -KZ_INF ? 0.0f : m_new;
    float e = 0.0f;
#pragma unroll
    for (int j = 0; j < ITEMS; ++j) e += __expf(v[j] - m_safe);
    st.s = st.s * __expf(st.m - m_safe) + e;
    st.sx += sum;
    st.m = m_new;
  }
  return st;
}

// One block per row. loss_rows: the row's loss as float (reduction mean / sum) or null; loss_out: as T
// (reduction none) or null. lse: float per row.
extern "C" __global__ void __launch_bounds__(THREADS)
    ce_rows(const T* __restrict__ x, const long long* __restrict__ target, float* __restrict__ loss_rows,
            T* __restrict__ loss_out, float* __restrict__ lse, int c, long long x_stride, long long ignore_index,
            float smoothing) {
  __shared__ Online red[32];
  const long long row = blockIdx.x;
  const T* xr = x + row * x_stride;
  const Online st = block_merge(row_state<PACK>(xr, c), red);
  if (threadIdx.x != 0) return;
  const float l = st.m == -KZ_INF ? __int_as_float(0x7fc00000) : st.m + logf(st.s);
  lse[row] = l;
  const long long t = target[row];
  float loss = 0.0f;
  if (t != ignore_index) {
    loss = l - kz_to_float(xr[t]);
    if (smoothing != 0.0f) loss = (1.0f - smoothing) * loss + smoothing * (l - st.sx / c);
  }
  if (loss_rows != nullptr) loss_rows[row] = loss;
  if (loss_out != nullptr) loss_out[row] = kz_from_float<T>(loss);
}

// out = sum of loss_rows (divided by the count of non-ignored targets when mean: 0 / 0 = NaN, as torch's
// mean of nothing). One block of 1024 threads: thread i adds rows i, i + 1024, ...; then a fixed-order tree.
extern "C" __global__ void __launch_bounds__(1024) ce_reduce(const float* __restrict__ loss_rows,
                                                             const long long* __restrict__ target,
                                                             T* __restrict__ out, long long rows,
                                                             long long ignore_index, int mean) {
  __shared__ float2 red[32];
  float s = 0.0f, n = 0.0f;
  for (long long r = threadIdx.x; r < rows; r += blockDim.x) {
    s += loss_rows[r];
    n += target[r] != ignore_index ? 1.0f : 0.0f;
  }
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    s += __shfl_xor_sync(0xffffffffu, s, o);
    n += __shfl_xor_sync(0xffffffffu, n, o);
  }
  if ((threadIdx.x & 31) == 0) red[threadIdx.x >> 5] = make_float2(s, n);
  __syncthreads();
  if (threadIdx.x == 0) {
    float total = 0.0f, count = 0.0f;
    for (int w = 0; w < (int)(blockDim.x >> 5); ++w) {
      total += red[w].x;
      count += red[w].y;
    }
    out[0] = kz_from_float<T>(mean ? total / count : total);
  }
}
