// div: out = a / b, through the shared binary kernels (div_vec, div_scalar, div_strided32,
// div_strided64; see ../_elementwise/binary.cuh). NVRTC compiles `/` on floats as IEEE division
// (-prec-div=true unless -use_fast_math), as torch's kernels do; the approximate one is 2 ulp off.
#include "../_elementwise/binary.cuh"

struct Div {
    __device__ __forceinline__ float operator()(float a, float b) const { return a / b; }
};

KZ_BINARY_KERNELS(div, Div)
