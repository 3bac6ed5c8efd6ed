// gelu_backward: out = grad * gelu'(x) (a = grad, b = x), through the shared binary kernels, once per
// formula: gelu_backward_none_* and gelu_backward_tanh_* (_vec, _scalar, _strided32, _strided64; see
// ../_elementwise/binary.cuh). erff and expf are CUDA's (2 ulp; not the fast intrinsics). Memory-bound
// like every binary op (12 bytes per float element moved against ~20 instructions).
#include "../_elementwise/binary.cuh"

#define SQRT_HALF 0.70710678118654752f
#define INV_SQRT_2PI 0.39894228040143268f
#define SQRT_2_OVER_PI 0.79788456080286536f
#define KAPPA 0.044715f

// cdf + x * pdf; x = ±inf: x * 0 = NaN, as torch's kernels
struct GeluBackwardNone {
    __device__ __forceinline__ float operator()(float grad, float x) const {
        const float cdf = 0.5f * (1.0f + erff(x * SQRT_HALF));
        const float pdf = expf(-0.5f * x * x) * INV_SQRT_2PI;
        return grad * (cdf + x * pdf);
    }
};

// (1 + t)/2 + x/2 * (1 - t^2) * du with t = tanh(u), written with e = exp(-2|u|), r = 1 / (1 + e):
// (1 + t)/2 = r (u >= 0) or e*r (u < 0), 1 - t^2 = 4*e*r^2 (accurate where t rounds to 1; see the op's
// spec). x = ±inf: u = ±inf, e = 0, then inf * 0 = NaN, as torch's.
struct GeluBackwardTanh {
    __device__ __forceinline__ float operator()(float grad, float x) const {
        const float u = SQRT_2_OVER_PI * (x + KAPPA * x * x * x);
        const float e = expf(-2.0f * fabsf(u));
        const float r = 1.0f / (1.0f + e);
        const float half_one_plus_t = u >= 0.0f ? r : e * r;
        const float du = SQRT_2_OVER_PI * (1.0f + 3.0f * KAPPA * x * x);
        return grad * (half_one_plus_t + 2.0f * x * e * r * r * du);
    }
};

KZ_BINARY_KERNELS(gelu_backward_none, GeluBackwardNone)
KZ_BINARY_KERNELS(gelu_backward_tanh, GeluBackwardTanh)
