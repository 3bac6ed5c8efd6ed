// dropout over a contiguous array of T: y[j] = x[j] · (keep_j ? scale : 0), keep_j from the 32-bit
// hash of (seed, j) that plugins/dropout/__init__.py defines (unsigned arithmetic wraps in CUDA).
// The vectorised loop is the unary ops' (unary_map); each thread derives the round keys once.
//
// Cost per element: two mixes (2 IMAD + 3 shift/xor each) and a few more integer operations,
// about 15; at the 3.0 TB/s floor a float16 array streams 750 G elements/s, which needs some
// 11 T integer operations/s of the H100's ~30 T (132 SMs x 128 lanes x 1.75 GHz): still memory-bound.
#include "../_elementwise/unary.cuh"
#include "hash.h"

struct DropoutFn {
    unsigned k1, k2, threshold;
    float scale;
    __device__ __forceinline__ float operator()(float v, long long j) const {
        const unsigned h = dropout_hash((unsigned long long)j, k1, k2);
        return v * ((h >> 8) >= threshold ? scale : 0.0f);  // x · 0: a dropped NaN or inf gives NaN, as torch
    }
};

__device__ __forceinline__ DropoutFn dropout_fn(unsigned seed_lo, unsigned seed_hi, unsigned threshold, float scale) {
    const unsigned k1 = dropout_key(seed_lo, seed_hi);
    return DropoutFn{k1, mix(k1 + GOLDEN), threshold, scale};
}

extern "C" __global__ void __launch_bounds__(THREADS) dropout_vec(const T* x, T* y, long long n, unsigned seed_lo,
                                                                  unsigned seed_hi, unsigned threshold, float scale) {
    unary_map<UNARY_VEC>(x, y, n, dropout_fn(seed_lo, seed_hi, threshold, scale));
}
extern "C" __global__ void __launch_bounds__(THREADS) dropout_scalar(const T* x, T* y, long long n, unsigned seed_lo,
                                                                     unsigned seed_hi, unsigned threshold, float scale) {
    unary_map<1>(x, y, n, dropout_fn(seed_lo, seed_hi, threshold, scale));
}
