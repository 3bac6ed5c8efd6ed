// Implicit-GEMM convolutions for the GEMM core (gemm.cuh beside it), shared by conv2d and conv2d_backward.
//
// The GEMMs read channels-last copies whose channel count is padded with zeros to Cp, a multiple of VEC:
// every 16-byte chunk of a pixel's channels is then whole and aligned, so all operand loads are cp.async
// chunks, and padding channels add 0·0. transpose_pad makes those copies from NCHW / KCRS tensors.

// out[b][j][i] = in[b][i][j] for i < rows, and 0 for rows <= i < rows_p: a batch of rows×cols matrices
// transposed (NCHW -> NHWC is b = N, rows = C, cols = H·W) with zero rows appended. Tiles go through
// shared memory, so that both the reads (along j) and the writes (along i) are coalesced: 32×32 tiles of
// float, 64×64 tiles of 2-byte types read and written as element pairs (a warp moves 128 bytes either
// way) where alignment allows. Grid (ceil(cols/TILE), ceil(rows_p/TILE), batch), block (32, 8).
#define TRANSPOSE_TILE (sizeof(T) == 2 ? 64 : 32)
extern "C" __global__ void __launch_bounds__(256)
    transpose_pad(const T* __restrict__ in, T* __restrict__ out, int rows, int cols, int rows_p) {
  constexpr int TILE = TRANSPOSE_TILE, PER = TILE / 32;  // PER elements per thread along a tile row
  __shared__ T tile[TILE][TILE + 1];  // +1: a tile column spreads over the banks
  const int i0 = blockIdx.y * TILE, j0 = blockIdx.x * TILE, tx = threadIdx.x;
  in += (i64)blockIdx.z * rows * cols;
  out += (i64)blockIdx.z * cols * rows_p;
  // pairs along j: j is even, so with an even row length and a 4-byte aligned base every pair is aligned
  const bool pairs_in = PER == 2 && cols % 2 == 0 && reinterpret_cast<unsigned long long>(in) % 4 == 0;
  const bool pairs_out = PER == 2 && rows_p % 2 == 0 && reinterpret_cast<unsigned long long>(out) % 4 == 0;
#pragma unroll
  for (int y = threadIdx.y; y < TILE; y += 8) {
    const int i = i0 + y, j = j0 + tx * PER;
    if (pairs_in && i < rows && j + 1 < cols) {
      const Pair<T> v = *reinterpret_cast<const Pair<T>*>(in + (i64)i * cols + j);
      tile[y][tx * PER] = v.x, tile[y][tx * PER + 1] = v.y;
    } else {
#pragma unroll
      for (int e = 0; e < PER; ++e) tile[y][tx * PER + e] = i < rows && j + e < cols ? in[(i64)i * cols + j + e] : T{};
    }
  }
  __syncthreads();
#pragma unroll
  for (int y = threadIdx.y; y < TILE; y += 8) {
    const int j = j0 + y, i = i0 + tx * PER;
    if (j >= cols) continue;
    if (pairs_out && i + 1 < rows_p) {
      *reinterpret_cast<Pair<T>*>(out + (i64)j * rows_p + i) = Pair<T>{tile[tx * PER][y], tile[tx * PER + 1][y]};
    } else {
#pragma unroll
      for (int e = 0; e < PER; ++e)
        if (i + e < rows_p) out[(i64)j * rows_p + i + e] = tile[tx * PER + e][y];
    }
  }
}

// D(m, q) = Σ_{r, s, c} w[m][r][s][c] · src(q, r, s, c), written to out (NCHW) with bias[m] added:
//   forward (TRANSPOSED false): m an output channel, q = (n, oh, ow) an output pixel,
//     src = x[n][oh·sh − ph + r·dh][ow·sw − pw + s·dw][c];
//   input gradient (TRANSPOSED true): m an input channel, q = (n, ih, iw) an input pixel, src = dy (the
//     output gradient) at oh = (ih + ph − r·dh) / sh, ow = (iw + pw − s·dw) / sw where both divide exactly,
//     c an output channel; w is then the weight as [C][R][S][Kp].
// Zero wherever the source pixel falls outside src. Reduction index kred = (r·S + s)·Cp + c over
// Kred = R·S·Cp; a chunk of VEC channels never straddles two taps (Cp and BK are multiples of VEC).
// A = w, [M][Kred] (contiguous along kred); B rows are pixels, gathered from src [N][Hs][Ws][Cp].
template <bool TRANSPOSED>
struct ConvGemm {
  static constexpr bool A_GK = true, B_GK = true;
  using AOp = Operand<true, BM>;
  using BOp = Operand<true, BN>;
  static constexpr int FAR = -(1 << 30);  // a pixel row that fails every bounds test (past Q)

  const T* w;
  const T* src;
  T* out;
  const T* bias;
  int M, Q, Kred, Cp, Hs, Ws, Ho, Wo, R, S, sh, sw, ph, pw, dh, dw, m0, n0, kt0;
  // this thread's B chunks: the image offset and the tap-free source row / column base of their pixels
  i64 base[BOp::PER_THREAD];
  int hb[BOp::PER_THREAD], wb[BOp::PER_THREAD];
  int r, s, c;  // the tap and channel of this thread's chunk position along the reduction, this k-tile

  // Per-thread state for k-tiles kt0, kt0 + 1, ... (load() then advances it one k-tile a call).
  __device__ void init() {
    const int plane = Ho * Wo;
#pragma unroll
    for (int i = 0; i < BOp::PER_THREAD; ++i) {
      int row, k;
      const bool ok = BOp::chunk(i, row, k) && n0 + row < Q;
      const int q = ok ? n0 + row : 0, n = q / plane, y = q % plane / Wo, x = q % Wo;
      base[i] = (i64)n * Hs * Ws * Cp;
      hb[i] = !ok ? FAR : TRANSPOSED ? y + ph : y * sh - ph;
      wb[i] = !ok ? FAR : TRANSPOSED ? x + pw : x * sw - pw;
    }
    const int kred = kt0 * BK + threadIdx.x % BOp::ALONG * VEC;  // every chunk of this thread sits there
    c = kred % Cp;
    r = kred / Cp / S;
    s = kred / Cp % S;
  }

  __device__ void load(T* sa, T* sb, int kt) {  // B's tap state follows the calls, which come in order
#pragma unroll
    for (int i = 0; i < AOp::PER_THREAD; ++i) {
      int row, k;
      if (!AOp::chunk(i, row, k)) continue;
      const int m = m0 + row, kred = (kt0 + kt) * BK + k;
      const bool ok = m < M && kred < Kred;
      AOp::template copy<true>(sa, row, k, ok ? w + (i64)m * Kred + kred : w, ok ? VEC : 0);
    }
#pragma unroll
    for (int i = 0; i < BOp::PER_THREAD; ++i) {
      int row, k;
      if (!BOp::chunk(i, row, k)) continue;
      int ih, iw;
      bool ok;
      if (TRANSPOSED) {
        const int hn = hb[i] - r * dh, wn = wb[i] - s * dw;
        if (sh == 1 && sw == 1) {
          ih = hn, iw = wn;
          ok = hn >= 0 && wn >= 0;
        } else {
          ih = hn / sh, iw = wn / sw;
          ok = hn >= 0 && wn >= 0 && hn == ih * sh && wn == iw * sw;
        }
        ok = ok && ih < Hs && iw < Ws;
      } else {
        ih = hb[i] + r * dh, iw = wb[i] + s * dw;
        ok = (unsigned)ih < (unsigned)Hs && (unsigned)iw < (unsigned)Ws;
      }
      ok = ok && r < R;
      BOp::template copy<true>(sb, row, k, ok ? src + base[i] + ((i64)ih * Ws + iw) * Cp + c : src, ok ? VEC : 0);
    }
    c += BK;  // next k-tile: the same position BK further along the reduction
    while (c >= Cp) {
      c -= Cp;
      if (++s == S) s = 0, ++r;
    }
  }

  struct Col {
    i64 off0, off1;  // offsets of outputs q and q + 1 in channel 0 of out
    bool ok0, ok1, pair;
  };
  __device__ Col column(int q) const {
    const int plane = Ho * Wo, n = q / plane, p = q - n * plane;
    Col col;
    col.ok0 = q < Q;
    col.ok1 = q + 1 < Q;
    col.off0 = (i64)n * M * plane + p;
    col.off1 = p + 1 < plane ? col.off0 + 1 : (i64)(n + 1) * M * plane;
    col.pair = col.ok1 && plane % 2 == 0;  // q is even: p is even, q + 1 in the same image, 2-element aligned
    return col;
  }
  __device__ void store(int m, const Col& col, float v0, float v1) const {
    if (m >= M) return;
    const float b = bias != nullptr ? kz_to_float(bias[m]) : 0.0f;
    T* o = out + (i64)m * Ho * Wo;
    if (col.pair) {
      store_pair(o + col.off0, v0 + b, v1 + b);
    } else {
      if (col.ok0) o[col.off0] = kz_from_float<T>(v0 + b);
      if (col.ok1) o[col.off1] = kz_from_float<T>(v1 + b);
    }
  }
};

// One launch of ConvGemm over ceil(M/BM)·ceil(Q/BN) tiles (blockIdx.x, grouped order).
template <bool TRANSPOSED>
__device__ __forceinline__ void conv_gemm(const T* w, const T* src, T* out, const T* bias, int M, int Q, int Cp,
                                          int Hs, int Ws, int Ho, int Wo, int R, int S, int sh, int sw, int ph,
                                          int pw, int dh, int dw) {
  ConvGemm<TRANSPOSED> p;
  p.w = w, p.src = src, p.out = out, p.bias = bias, p.M = M, p.Q = Q, p.Kred = R * S * Cp, p.Cp = Cp;
  p.Hs = Hs, p.Ws = Ws, p.Ho = Ho, p.Wo = Wo, p.R = R, p.S = S, p.sh = sh, p.sw = sw, p.ph = ph, p.pw = pw;
  p.dh = dh, p.dw = dw, p.kt0 = 0;
  block_tile(M, Q, p.m0, p.n0);
  p.init();
  gemm_tile(p, p.m0, p.n0, (p.Kred + BK - 1) / BK);
}
