// mul: out = a * b, through the shared binary kernels (mul_vec, mul_scalar, mul_strided32,
// mul_strided64; see ../_elementwise/binary.cuh).
#include "../_elementwise/binary.cuh"

struct Mul {
    __device__ __forceinline__ float operator()(float a, float b) const { return a * b; }
};

KZ_BINARY_KERNELS(mul, Mul)
