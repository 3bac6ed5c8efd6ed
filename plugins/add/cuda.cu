// out = a + alpha * b over arrays of T (float, kz_half or kz_bf16; see the backend's PRELUDE), computed in
// float, on the binary kernels of ../_elementwise/binary.cuh with alpha as an argument of each entry point:
// add_vec / add_scalar (a and b dense, of out's shape) and add_strided32 / add_strided64 (a and b at their own
// strides, 0 along broadcast dimensions).
#include "../_elementwise/binary.cuh"

struct Add {
    float alpha;
    __device__ __forceinline__ float operator()(float a, float b) const { return a + alpha * b; }
};

extern "C" __global__ void __launch_bounds__(THREADS)
add_vec(const T* a, const T* b, T* out, float alpha, long long n) {
    binary_packs<Add, VEC>(a, b, out, n, Add{alpha});
}
extern "C" __global__ void __launch_bounds__(THREADS)
add_scalar(const T* a, const T* b, T* out, float alpha, long long n) {
    binary_packs<Add, 1>(a, b, out, n, Add{alpha});
}
extern "C" __global__ void __launch_bounds__(THREADS)
add_strided32(const T* a, const T* b, T* out, float alpha, long long n, LAYOUT_PARAMS) {
    const Dim dims[MAX_DIMS] = LAYOUT_DIMS;
    binary_dims<Add, false>(a, b, out, n, ndim, dims, Add{alpha});
}
extern "C" __global__ void __launch_bounds__(THREADS)
add_strided64(const T* a, const T* b, T* out, float alpha, long long n, LAYOUT_PARAMS) {
    const Dim dims[MAX_DIMS] = LAYOUT_DIMS;
    binary_dims<Add, true>(a, b, out, n, ndim, dims, Add{alpha});
}
