// conv2d on the shared GEMM core (../_gemm/gemm.cuh): D = w (K × R·S·Cp) · im2col, gathered on the fly
// from a channels-last copy of x (conv.cuh), written straight to NCHW with the bias. A 1×1 convolution
// with stride 1 and no padding is a plain GEMM per image on NCHW: out[n] (K × H·W) = w (K × C) · x[n].
#include "../_gemm/gemm.cuh"
#include "../_gemm/conv.cuh"

extern "C" __global__ void __launch_bounds__(THREADS)
    conv2d_forward(const T* w, const T* x, T* out, const T* bias, int K, int Q, int Cp, int H, int W, int OH, int OW,
                   int R, int S, int sh, int sw, int ph, int pw, int dh, int dw) {
  conv_gemm<false>(w, x, out, bias, K, Q, Cp, H, W, OH, OW, R, S, sh, sw, ph, pw, dh, dw);
}

// blockIdx.z = image: A = w (K×C, contiguous along C), B = x[n] (C × HW, contiguous along the pixels).
extern "C" __global__ void __launch_bounds__(THREADS)
    conv2d_1x1_aligned(const T* w, const T* x, T* out, const T* bias, int K, int HW, int C) {
  strided_gemm<true, false, true>(w, x, out, bias, 1, K, HW, C, C, HW, 0, (i64)C * HW);
}
extern "C" __global__ void __launch_bounds__(THREADS)
    conv2d_1x1_guarded(const T* w, const T* x, T* out, const T* bias, int K, int HW, int C) {
  strided_gemm<true, false, false>(w, x, out, bias, 1, K, HW, C, C, HW, 0, (i64)C * HW);
}
