// The one CUDA kernel of the unary elementwise ops: y[j] = f(x[j], j) over a contiguous array
// of T (float, kz_half or kz_bf16; see the backend's PRELUDE), computed in float.
//
// An op's cuda.cu defines UNARY(x, a) (a: the op's float parameter, pow's exponent; the others
// ignore it) and includes this file, which then defines the kernels unary_vec and unary_scalar.
// dropout includes it without UNARY, for unary_map alone, with a functor that hashes j.
//
// Memory-bound (16384x16384 float: 2 GiB moved, 0.716 ms at 3.0 TB/s), so the *_vec kernels
// move 16 bytes per access (4 floats or 8 halves) and each thread issues ITEMS such loads,
// THREADS * 16 bytes apart (a warp reads 512 contiguous bytes per load), before its first
// store. They need x and y 16-byte aligned; the *_scalar kernels (one element per access)
// take any contiguous array.

#include "../_cuda/streaming.cuh"

#define UNARY_VEC (16 / (int)sizeof(T))

// y[j] = f(x[j], j) for j < n, PACK elements per access; the grid covers n / PACK packs with
// THREADS * ITEMS packs per block, and has one block at least (block 0 does the tail).
template <int PACK, class F>
__device__ __forceinline__ void unary_map(const T* __restrict__ x, T* __restrict__ y, long long n, const F& f) {
    typedef typename RawOf<PACK * sizeof(T)>::type B;
    const B* xb = reinterpret_cast<const B*>(x);
    B* yb = reinterpret_cast<B*>(y);
    const long long packs = n / PACK;
    const long long first = (long long)blockIdx.x * (THREADS * ITEMS) + threadIdx.x;
    Pack<PACK> v[ITEMS];
#pragma unroll
    for (int i = 0; i < ITEMS; ++i) {
        const long long p = first + (long long)i * THREADS;
        if (p < packs) v[i].raw = xb[p];
    }
#pragma unroll
    for (int i = 0; i < ITEMS; ++i) {
        const long long p = first + (long long)i * THREADS;
        if (p < packs) {
#pragma unroll
            for (int k = 0; k < PACK; ++k) v[i].v[k] = kz_from_float<T>(f(kz_to_float(v[i].v[k]), p * PACK + k));
            yb[p] = v[i].raw;
        }
    }
    // the n % PACK elements after the last whole pack (fewer than PACK <= 8 < THREADS), by block 0
    if (PACK > 1 && blockIdx.x == 0 && threadIdx.x < n - packs * PACK) {
        const long long j = packs * PACK + threadIdx.x;
        y[j] = kz_from_float<T>(f(kz_to_float(x[j]), j));
    }
}

#ifdef UNARY
struct UnaryFn {
    float a;
    __device__ __forceinline__ float operator()(float v, long long) const { return UNARY(v, a); }
};

extern "C" __global__ void __launch_bounds__(THREADS) unary_vec(const T* x, T* y, long long n, float a) {
    unary_map<UNARY_VEC>(x, y, n, UnaryFn{a});
}
extern "C" __global__ void __launch_bounds__(THREADS) unary_scalar(const T* x, T* y, long long n, float a) {
    unary_map<1>(x, y, n, UnaryFn{a});
}
#endif
