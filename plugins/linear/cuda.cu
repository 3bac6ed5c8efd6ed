// y = x·wᵀ + bias on the shared GEMM core (gemm.cuh): A = x (M×K), B(k, n) = w[n][k], both contiguous
// along K; the bias is added per column to the float32 sums before the one rounding to T.
#include "../_gemm/gemm.cuh"

extern "C" __global__ void __launch_bounds__(THREADS)
    linear_aligned(const T* x, const T* w, const T* bias, T* y, int M, int N, int K) {
  strided_gemm<true, true, true>(x, w, y, bias, 0, M, N, K, K, K, 0, 0);
}
extern "C" __global__ void __launch_bounds__(THREADS)
    linear_guarded(const T* x, const T* w, const T* bias, T* y, int M, int N, int K) {
  strided_gemm<true, true, false>(x, w, y, bias, 0, M, N, K, K, K, 0, 0);
}
