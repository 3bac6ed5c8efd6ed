// The gradients of linear on the shared GEMM core (gemm.cuh), with g = grad_out (M×N), x (M×K), w (N×K):
//   grad_x (M×K) = g·w:   A = g, contiguous along the reduction N; B(n, k) = w[n][k], contiguous along k
//   grad_w (N×K) = gᵀ·x:  A(n, i) = g[i][n], contiguous along n; B(i, k) = x[i][k], contiguous along k
// and grad_b = column sums of g (column_sums.cuh). With an activation, g is first dz = grad_out·act'(pre)
// (activation_grad_pass, KZ_ACTIVATION), rounded to T as the products read it.
#include "../_gemm/gemm.cuh"
#include "../_gemm/column_sums.cuh"

extern "C" __global__ void __launch_bounds__(THREADS)
    grad_x_aligned(const T* g, const T* w, T* gx, int M, int N, int K) {
  strided_gemm<true, false, true>(g, w, gx, nullptr, 0, M, K, N, N, K, 0, 0);
}
extern "C" __global__ void __launch_bounds__(THREADS)
    grad_x_guarded(const T* g, const T* w, T* gx, int M, int N, int K) {
  strided_gemm<true, false, false>(g, w, gx, nullptr, 0, M, K, N, N, K, 0, 0);
}
extern "C" __global__ void __launch_bounds__(THREADS)
    grad_w_aligned(const T* g, const T* x, T* gw, int M, int N, int K) {
  strided_gemm<false, false, true>(g, x, gw, nullptr, 0, N, K, M, N, K, 0, 0);
}
extern "C" __global__ void __launch_bounds__(THREADS)
    grad_w_guarded(const T* g, const T* x, T* gw, int M, int N, int K) {
  strided_gemm<false, false, false>(g, x, gw, nullptr, 0, N, K, M, N, K, 0, 0);
}
extern "C" __global__ void activation_grad_pass(const T* g, const T* pre, T* dz, i64 n) {
  const i64 i = (i64)blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) dz[i] = kz_from_float<T>(activation_grad(kz_to_float(g[i]), kz_to_float(pre[i])));
}
