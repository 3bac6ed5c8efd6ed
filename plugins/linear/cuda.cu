// y = act(x·wᵀ + bias) on the shared GEMM core (gemm.cuh): A = x (M×K), B(k, n) = w[n][k], both contiguous
// along K; the bias is added per column to the float32 sums and the activation (KZ_ACTIVATION) applied before
// the one rounding to T. activation_pass makes y = act(z) from a stored z (the pre-activation asked for).
#include "../_gemm/gemm.cuh"

extern "C" __global__ void __launch_bounds__(THREADS)
    linear_aligned(const T* x, const T* w, const T* bias, T* y, int M, int N, int K) {
  strided_gemm<true, true, true>(x, w, y, bias, 0, M, N, K, K, K, 0, 0);
}
extern "C" __global__ void __launch_bounds__(THREADS)
    linear_guarded(const T* x, const T* w, const T* bias, T* y, int M, int N, int K) {
  strided_gemm<true, true, false>(x, w, y, bias, 0, M, N, K, K, K, 0, 0);
}
extern "C" __global__ void activation_pass(const T* z, T* y, i64 n) {
  const i64 i = (i64)blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = kz_from_float<T>(activate(kz_to_float(z[i])));
}
