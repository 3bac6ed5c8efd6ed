// dst[...] = src over arrays of T (float, kz_half or kz_bf16); values are moved as T, never converted
// (bit-exact, NaN payloads included).
//
// copy_vec / copy_scalar(dst, src, n): dst and src dense, of one shape. Memory-bound (16384x16384
// float: 2 GiB moved, 0.72 ms at 3.0 TB/s): copy_vec moves 16 bytes per access, each thread issuing
// ITEMS loads, THREADS * 16 bytes apart, before its first store; it needs both arrays 16-byte aligned
// (a slice may start anywhere). copy_scalar moves one element per access.
//
// copy_strided32 / copy_strided64(dst, src, n, ndim, DIM_PARAMS(0..5)): over `ndim` merged
// dimensions ordered by dst's strides (operand 0 of the layout; src is operand 1, stride 0 where
// broadcast), so consecutive threads store along dst's memory. copy_strided32 takes fewer than 2**31
// elements (see ../_elementwise/strided.cuh).
#include "../_elementwise/strided.cuh"

template <int PACK>
__device__ __forceinline__ void copy_packs(T* __restrict__ dst, const T* __restrict__ src, long long n) {
    typedef typename RawOf<PACK * sizeof(T)>::type B;
    const B* sb = reinterpret_cast<const B*>(src);
    B* db = reinterpret_cast<B*>(dst);
    const long long packs = n / PACK;
    const long long first = (long long)blockIdx.x * (THREADS * ITEMS) + threadIdx.x;
    B v[ITEMS];
#pragma unroll
    for (int i = 0; i < ITEMS; ++i) {
        const long long p = first + (long long)i * THREADS;
        if (p < packs) v[i] = sb[p];
    }
#pragma unroll
    for (int i = 0; i < ITEMS; ++i) {
        const long long p = first + (long long)i * THREADS;
        if (p < packs) db[p] = v[i];
    }
    // the n % PACK elements after the last whole pack, by block 0 (the grid has one at least)
    if (PACK > 1 && blockIdx.x == 0 && threadIdx.x < n - packs * PACK) {
        const long long j = packs * PACK + threadIdx.x;
        dst[j] = src[j];
    }
}

extern "C" __global__ void __launch_bounds__(THREADS) copy_vec(T* dst, const T* src, long long n) {
    copy_packs<VEC>(dst, src, n);
}
extern "C" __global__ void __launch_bounds__(THREADS) copy_scalar(T* dst, const T* src, long long n) {
    copy_packs<1>(dst, src, n);
}

template <bool WIDE>
__device__ __forceinline__ void copy_dims(T* __restrict__ dst, const T* __restrict__ src, long long n, int ndim,
                                          const Dim (&dims)[MAX_DIMS]) {
    const long long first = (long long)blockIdx.x * (THREADS * ITEMS) + threadIdx.x;
    T v[ITEMS];
    long long offset_dst[ITEMS];
#pragma unroll
    for (int i = 0; i < ITEMS; ++i) {
        const long long index = first + (long long)i * THREADS;
        if (index < n) {
            long long offset_src;
            layout_offsets<WIDE>(index, ndim, dims, offset_dst[i], offset_src);
            v[i] = src[offset_src];
        }
    }
#pragma unroll
    for (int i = 0; i < ITEMS; ++i) {
        const long long index = first + (long long)i * THREADS;
        if (index < n) dst[offset_dst[i]] = v[i];
    }
}

extern "C" __global__ void __launch_bounds__(THREADS)
copy_strided32(T* dst, const T* src, long long n, LAYOUT_PARAMS) {
    const Dim dims[MAX_DIMS] = LAYOUT_DIMS;
    copy_dims<false>(dst, src, n, ndim, dims);
}
extern "C" __global__ void __launch_bounds__(THREADS)
copy_strided64(T* dst, const T* src, long long n, LAYOUT_PARAMS) {
    const Dim dims[MAX_DIMS] = LAYOUT_DIMS;
    copy_dims<true>(dst, src, n, ndim, dims);
}
