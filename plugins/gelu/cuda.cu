// gelu over a contiguous array of T (float, kz_half or kz_bf16; see the backend's PRELUDE),
// computed in float with erff / tanhf (CUDA's, 2 ulp; not the fast intrinsics).
//
// Memory-bound (16384x16384 float: 2 GiB moved, 0.716 ms at 3.0 TB/s), so the *_vec kernels
// move 16 bytes per access (4 floats or 8 halves) and each thread issues ITEMS such loads,
// THREADS * 16 bytes apart (a warp reads 512 contiguous bytes per load), before its first
// store. They need x and y 16-byte aligned; the *_scalar kernels (one element per access)
// take any contiguous array.
#ifndef ITEMS
#define ITEMS 4
#endif
#ifndef THREADS
#define THREADS 256
#endif

#define SQRT_HALF 0.70710678118654752f
#define SQRT_2_OVER_PI 0.79788456080286536f
#define KAPPA 0.044715f

// (0.5f * x) first: x * (1 + erf) would overflow for |x| above FLT_MAX / 2.
// x = -inf gives -inf * 0 = NaN, as torch's kernels do.
template <bool TANH> __device__ __forceinline__ float gelu(float x) {
    if (TANH) return 0.5f * x * (1.0f + tanhf(SQRT_2_OVER_PI * (x + KAPPA * x * x * x)));
    return 0.5f * x * (1.0f + erff(x * SQRT_HALF));
}

template <int BYTES> struct Bits;  // an unsigned type of BYTES bytes: one memory access
template <> struct Bits<16> { typedef uint4 type; };
template <> struct Bits<4> { typedef unsigned type; };
template <> struct Bits<2> { typedef unsigned short type; };

template <int PACK> union Pack {  // PACK elements moved as one access
    typename Bits<PACK * sizeof(T)>::type bits;
    T v[PACK];
};

template <int PACK, bool TANH>
__device__ __forceinline__ void gelu_packs(const T* __restrict__ x, T* __restrict__ y, long long n) {
    typedef typename Bits<PACK * sizeof(T)>::type B;
    const B* xb = reinterpret_cast<const B*>(x);
    B* yb = reinterpret_cast<B*>(y);
    const long long packs = n / PACK;
    const long long first = (long long)blockIdx.x * (THREADS * ITEMS) + threadIdx.x;
    Pack<PACK> v[ITEMS];
#pragma unroll
    for (int i = 0; i < ITEMS; ++i) {
        const long long p = first + (long long)i * THREADS;
        if (p < packs) v[i].bits = xb[p];
    }
#pragma unroll
    for (int i = 0; i < ITEMS; ++i) {
        const long long p = first + (long long)i * THREADS;
        if (p < packs) {
#pragma unroll
            for (int k = 0; k < PACK; ++k) v[i].v[k] = kz_from_float<T>(gelu<TANH>(kz_to_float(v[i].v[k])));
            yb[p] = v[i].bits;
        }
    }
    // the n % PACK elements after the last whole pack, by block 0 (the grid has one at least)
    if (PACK > 1 && blockIdx.x == 0 && threadIdx.x < n - packs * PACK) {
        const long long j = packs * PACK + threadIdx.x;
        y[j] = kz_from_float<T>(gelu<TANH>(kz_to_float(x[j])));
    }
}

#define VEC (16 / (int)sizeof(T))

extern "C" __global__ void __launch_bounds__(THREADS) gelu_erf_vec(const T* x, T* y, long long n) {
    gelu_packs<VEC, false>(x, y, n);
}
extern "C" __global__ void __launch_bounds__(THREADS) gelu_erf_scalar(const T* x, T* y, long long n) {
    gelu_packs<1, false>(x, y, n);
}
extern "C" __global__ void __launch_bounds__(THREADS) gelu_tanh_vec(const T* x, T* y, long long n) {
    gelu_packs<VEC, true>(x, y, n);
}
extern "C" __global__ void __launch_bounds__(THREADS) gelu_tanh_scalar(const T* x, T* y, long long n) {
    gelu_packs<1, true>(x, y, n);
}
