// relu_backward: out = y <= 0 ? 0 : grad (a = grad, b = y), through the shared binary kernels
// (relu_backward_vec, ..._scalar, ..._strided32, ..._strided64; see ../_elementwise/binary.cuh).
// `y <= 0` is false for a NaN y, which passes grad through, as torch's threshold_backward.
#include "../_elementwise/binary.cuh"

struct ReluBackward {
    __device__ __forceinline__ float operator()(float grad, float y) const { return y <= 0.0f ? 0.0f : grad; }
};

KZ_BINARY_KERNELS(relu_backward, ReluBackward)
