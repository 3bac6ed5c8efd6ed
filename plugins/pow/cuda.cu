// pow: the shared unary kernel with torch's special cases (see plugins/pow/__init__.py) and CUDA's
// powf otherwise (2 ulp); a is a kernel argument, so every warp takes the same branch.
__device__ __forceinline__ float pow_torch(float x, float a) {
    if (a == 0.5f) return sqrtf(x);  // sqrt(-inf) = NaN and sqrt(-0) = -0: powf gives inf and +0
    if (a == -0.5f) return 1.0f / sqrtf(x);
    if (a == -1.0f) return 1.0f / x;
    if (a == 2.0f) return x * x;
    if (a == 3.0f) return x * x * x;
    return powf(x, a);
}

#define UNARY(x, a) pow_torch(x, a)
#include "../_elementwise/unary.cuh"
