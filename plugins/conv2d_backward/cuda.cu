// conv2d's gradients on the shared GEMM core (../_gemm/gemm.cuh), from channels-last copies with
// channels zero-padded to multiples of VEC (conv.cuh's transpose_pad): dy_t [N][OH][OW][Kp] of the
// output gradient, x_t [N][H][W][Cp] of x, and the weight as [C][R][S][Kp].
//   grad_x: conv.cuh's ConvGemm<true> (a transposed convolution), written NCHW
//   grad_w: Wgrad below, split over the reduction (blockIdx.z), float32 partials reduced by wgrad_reduce
//   grad_b: column sums of dy_t (../_gemm/column_sums.cuh)
#include "../_gemm/gemm.cuh"
#include "../_gemm/conv.cuh"
#include "../_gemm/column_sums.cuh"

extern "C" __global__ void __launch_bounds__(THREADS)
    conv2d_grad_x(const T* w_t, const T* dy_t, T* dx, int C, int Q, int Kp, int OH, int OW, int H, int W, int R,
                  int S, int sh, int sw, int ph, int pw, int dh, int dw) {
  conv_gemm<true>(w_t, dy_t, dx, nullptr, C, Q, Kp, OH, OW, H, W, R, S, sh, sw, ph, pw, dh, dw);
}

// D(m, col) = Σ_q dy_t[q][m] · x_t[n][ih][iw][c] over output pixels q = (n, oh, ow): m an output channel,
// col = (r·S + s)·Cp + c, ih = oh·sh − ph + r·dh, iw = ow·sw − pw + s·dw (zero outside x).
// A(m, q) = dy_t[q·Kp + m] is contiguous along m; B(q, col) is contiguous along col (c). Each thread's B
// chunks keep one column (Operand's invariant), so its tap (r, s, c) is fixed; the pixels of its chunks
// advance by BK each k-tile. D goes to the float32 partials ws[blockIdx.z][m][col].
struct Wgrad {
  static constexpr bool A_GK = false, B_GK = false;
  using AOp = Operand<false, BM>;
  using BOp = Operand<false, BN>;

  const T* dy;
  const T* x;
  float* ws;
  int M, Ncols, Kp, Cp, Q, Nimg, H, W, OH, OW, S, sh, sw, ph, pw, dh, dw, m0, n0, kt0;
  int col, hoff, woff, c;  // this thread's B column and its tap's shifts
  bool col_ok;
  int pn[BOp::PER_THREAD], poh[BOp::PER_THREAD], pow_[BOp::PER_THREAD];  // its chunks' pixels, this k-tile

  __device__ void init() {
    col = n0 + threadIdx.x % BOp::ALONG * VEC;
    col_ok = col < Ncols;
    const int rs = col / Cp;
    c = col - rs * Cp;
    hoff = rs / S * dh - ph;
    woff = rs % S * dw - pw;
#pragma unroll
    for (int i = 0; i < BOp::PER_THREAD; ++i) {
      int row, k;
      BOp::chunk(i, row, k);
      const int q = kt0 * BK + k;
      pn[i] = q / (OH * OW);
      poh[i] = q % (OH * OW) / OW;
      pow_[i] = q % OW;
    }
  }

  __device__ void load(T* sa, T* sb, int kt) {
    const int k0 = (kt0 + kt) * BK;
#pragma unroll
    for (int i = 0; i < AOp::PER_THREAD; ++i) {
      int row, k;
      if (!AOp::chunk(i, row, k)) continue;
      const int m = m0 + row, q = k0 + k;
      const bool ok = q < Q && m < Kp;
      AOp::template copy<true>(sa, row, k, ok ? dy + (i64)q * Kp + m : dy, ok ? VEC : 0);
    }
#pragma unroll
    for (int i = 0; i < BOp::PER_THREAD; ++i) {
      int row, k;
      const bool in_tile = BOp::chunk(i, row, k);
      const int ih = poh[i] * sh + hoff, iw = pow_[i] * sw + woff;
      const bool ok = in_tile && col_ok && pn[i] < Nimg && (unsigned)ih < (unsigned)H && (unsigned)iw < (unsigned)W;
      if (in_tile)
        BOp::template copy<true>(sb, row, k, ok ? x + (((i64)pn[i] * H + ih) * W + iw) * Cp + c : x, ok ? VEC : 0);
      // the next k-tile's pixel: BK further
      pow_[i] += BK % OW;
      poh[i] += BK / OW;
      if (pow_[i] >= OW) pow_[i] -= OW, ++poh[i];
      while (poh[i] >= OH) poh[i] -= OH, ++pn[i];
    }
  }

  struct Col {
    int col;
  };
  __device__ Col column(int n) const { return Col{n}; }
  __device__ void store(int m, const Col& cl, float v0, float v1) const {
    if (m < M && cl.col < Ncols)  // Ncols is a multiple of VEC: col + 1 < Ncols too
      *reinterpret_cast<float2*>(ws + (i64)m * Ncols + cl.col) = make_float2(v0, v1);
  }
};

// Split s = blockIdx.z takes k-tiles [s·per_split, min(k_tiles, (s+1)·per_split)) of the Q pixels.
extern "C" __global__ void __launch_bounds__(THREADS)
    conv2d_grad_w(const T* dy_t, const T* x_t, float* ws, int K, int Ncols, int Kp, int Cp, int Nimg, int H, int W,
                  int OH, int OW, int S, int sh, int sw, int ph, int pw, int dh, int dw, int per_split) {
  Wgrad p;
  p.dy = dy_t, p.x = x_t, p.M = K, p.Ncols = Ncols, p.Kp = Kp, p.Cp = Cp, p.Q = Nimg * OH * OW, p.Nimg = Nimg;
  p.H = H, p.W = W, p.OH = OH, p.OW = OW, p.S = S, p.sh = sh, p.sw = sw, p.ph = ph, p.pw = pw, p.dh = dh, p.dw = dw;
  p.ws = ws + (i64)blockIdx.z * K * Ncols;
  block_tile(K, Ncols, p.m0, p.n0);
  const int k_tiles = (p.Q + BK - 1) / BK;
  p.kt0 = blockIdx.z * per_split;
  p.init();
  gemm_tile(p, p.m0, p.n0, min(per_split, k_tiles - p.kt0));
}

// dw[k][c][r][s] = Σ_z ws[z][k][(r·S + s)·Cp + c], the splits added in order (deterministic).
extern "C" __global__ void wgrad_reduce(const float* ws, T* dw, int splits, int K, int C, int RS, int Cp) {
  const i64 i = (i64)blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= (i64)K * C * RS) return;
  const int k = i / ((i64)C * RS), c = i / RS % C, rs = i % RS;
  const i64 at = ((i64)k * RS + rs) * Cp + c, split = (i64)K * RS * Cp;
  float sum = 0.0f;
  for (int z = 0; z < splits; ++z) sum += ws[z * split + at];
  dw[i] = kz_from_float<T>(sum);
}
