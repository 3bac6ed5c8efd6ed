// The kernels of every binary elementwise op: out = F(a, b) over arrays of T (float, kz_half or
// kz_bf16; see the backend's PRELUDE), computed in float. `out` is always dense. An op's cuda.cu
// defines F, a functor `float operator()(float a, float b) const`, and instantiates the entry
// points, named after a prefix, with KZ_BINARY_KERNELS(prefix, F); an op whose F holds a scalar
// (add's alpha) writes its entry points itself, passing that F to binary_packs and binary_dims:
//
// prefix_vec / prefix_scalar(a, b, out, n): a and b dense, of out's shape. Memory-bound
// (16384x16384 float: 3 GiB moved, 1.07 ms at 3.0 TB/s): prefix_vec moves 16 bytes per access
// (4 floats or 8 halves), each thread issuing ITEMS such loads per input, THREADS * 16 bytes
// apart, before its first store; it needs all three arrays 16-byte aligned. prefix_scalar moves
// one element per access.
//
// prefix_strided32 / prefix_strided64(a, b, out, n, ndim, DIM_PARAMS(0..5)): out dense over `ndim`
// merged dimensions, a and b read at their own strides (operands 0 and 1 of the layout; 0 along
// broadcast dimensions), so nothing is expanded. strided32 takes fewer than 2**31 elements.
#include "strided.cuh"

template <class F, int PACK>
__device__ __forceinline__ void binary_packs(const T* __restrict__ a, const T* __restrict__ b, T* __restrict__ out,
                                             long long n, const F& f) {
    typedef typename RawOf<PACK * sizeof(T)>::type B;
    const B* ab = reinterpret_cast<const B*>(a);
    const B* bb = reinterpret_cast<const B*>(b);
    B* ob = reinterpret_cast<B*>(out);
    const long long packs = n / PACK;
    const long long first = (long long)blockIdx.x * (THREADS * ITEMS) + threadIdx.x;
    Pack<PACK> va[ITEMS], vb[ITEMS];
#pragma unroll
    for (int i = 0; i < ITEMS; ++i) {
        const long long p = first + (long long)i * THREADS;
        if (p < packs) {
            va[i].raw = ab[p];
            vb[i].raw = bb[p];
        }
    }
#pragma unroll
    for (int i = 0; i < ITEMS; ++i) {
        const long long p = first + (long long)i * THREADS;
        if (p < packs) {
#pragma unroll
            for (int k = 0; k < PACK; ++k)
                va[i].v[k] = kz_from_float<T>(f(kz_to_float(va[i].v[k]), kz_to_float(vb[i].v[k])));
            ob[p] = va[i].raw;
        }
    }
    // the n % PACK elements after the last whole pack, by block 0 (the grid has one at least)
    if (PACK > 1 && blockIdx.x == 0 && threadIdx.x < n - packs * PACK) {
        const long long j = packs * PACK + threadIdx.x;
        out[j] = kz_from_float<T>(f(kz_to_float(a[j]), kz_to_float(b[j])));
    }
}

template <class F, bool WIDE>
__device__ __forceinline__ void binary_dims(const T* __restrict__ a, const T* __restrict__ b, T* __restrict__ out,
                                            long long n, int ndim, const Dim (&dims)[MAX_DIMS], const F& f) {
    const long long first = (long long)blockIdx.x * (THREADS * ITEMS) + threadIdx.x;
    float va[ITEMS], vb[ITEMS];
#pragma unroll
    for (int i = 0; i < ITEMS; ++i) {
        const long long index = first + (long long)i * THREADS;
        va[i] = vb[i] = 0.0f;
        if (index < n) {
            long long offset_a, offset_b;
            layout_offsets<WIDE>(index, ndim, dims, offset_a, offset_b);
            va[i] = kz_to_float(a[offset_a]);
            vb[i] = kz_to_float(b[offset_b]);
        }
    }
#pragma unroll
    for (int i = 0; i < ITEMS; ++i) {
        const long long index = first + (long long)i * THREADS;
        if (index < n) out[index] = kz_from_float<T>(f(va[i], vb[i]));
    }
}

#define KZ_BINARY_KERNELS(prefix, F)                                                                              \
    extern "C" __global__ void __launch_bounds__(THREADS)                                                         \
        prefix##_vec(const T* a, const T* b, T* out, long long n) {                                               \
        binary_packs<F, VEC>(a, b, out, n, F{});                                                                  \
    }                                                                                                             \
    extern "C" __global__ void __launch_bounds__(THREADS)                                                         \
        prefix##_scalar(const T* a, const T* b, T* out, long long n) {                                            \
        binary_packs<F, 1>(a, b, out, n, F{});                                                                    \
    }                                                                                                             \
    extern "C" __global__ void __launch_bounds__(THREADS)                                                         \
        prefix##_strided32(const T* a, const T* b, T* out, long long n, LAYOUT_PARAMS) {                          \
        const Dim dims[MAX_DIMS] = LAYOUT_DIMS;                                                                   \
        binary_dims<F, false>(a, b, out, n, ndim, dims, F{});                                                     \
    }                                                                                                             \
    extern "C" __global__ void __launch_bounds__(THREADS)                                                         \
        prefix##_strided64(const T* a, const T* b, T* out, long long n, LAYOUT_PARAMS) {                          \
        const Dim dims[MAX_DIMS] = LAYOUT_DIMS;                                                                   \
        binary_dims<F, true>(a, b, out, n, ndim, dims, F{});                                                      \
    }
