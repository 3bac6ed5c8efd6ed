// gelu over a contiguous array of T (float, kz_half or kz_bf16; see the backend's PRELUDE),
// computed in float with erff / tanhf (CUDA's, 2 ulp; not the fast intrinsics).
//
// The loop is the unary ops' (unary_map of ../_elementwise/unary.cuh): memory-bound, so the *_vec kernels
// move 16 bytes per access and need x and y 16-byte aligned; the *_scalar kernels take any contiguous array.
#include "../_elementwise/unary.cuh"

#define SQRT_HALF 0.70710678118654752f
#define SQRT_2_OVER_PI 0.79788456080286536f
#define KAPPA 0.044715f

// (0.5f * x) first: x * (1 + erf) would overflow for |x| above FLT_MAX / 2.
// x = -inf gives -inf * 0 = NaN, as torch's kernels do.
template <bool TANH> __device__ __forceinline__ float gelu(float x) {
    if (TANH) return 0.5f * x * (1.0f + tanhf(SQRT_2_OVER_PI * (x + KAPPA * x * x * x)));
    return 0.5f * x * (1.0f + erff(x * SQRT_HALF));
}

template <bool TANH> struct GeluFn {
    __device__ __forceinline__ float operator()(float v, long long) const { return gelu<TANH>(v); }
};

extern "C" __global__ void __launch_bounds__(THREADS) gelu_erf_vec(const T* x, T* y, long long n) {
    unary_map<UNARY_VEC>(x, y, n, GeluFn<false>{});
}
extern "C" __global__ void __launch_bounds__(THREADS) gelu_erf_scalar(const T* x, T* y, long long n) {
    unary_map<1>(x, y, n, GeluFn<false>{});
}
extern "C" __global__ void __launch_bounds__(THREADS) gelu_tanh_vec(const T* x, T* y, long long n) {
    unary_map<UNARY_VEC>(x, y, n, GeluFn<true>{});
}
extern "C" __global__ void __launch_bounds__(THREADS) gelu_tanh_scalar(const T* x, T* y, long long n) {
    unary_map<1>(x, y, n, GeluFn<true>{});
}
