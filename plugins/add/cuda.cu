// out = a + alpha * b over arrays of T (float, kz_half or kz_bf16; see the backend's PRELUDE),
// computed in float. `out` is always dense.
//
// add_vec / add_scalar: a and b dense, of out's shape. Memory-bound (16384x16384 float: 3 GiB
// moved, 1.07 ms at 3.0 TB/s): add_vec moves 16 bytes per access (4 floats or 8 halves), each
// thread issuing ITEMS such loads per input, THREADS * 16 bytes apart, before its first store;
// it needs all three arrays 16-byte aligned. add_scalar moves one element per access.
//
// add_strided32 / add_strided64: out dense over `ndim` merged dimensions, a and b read at
// their own strides (0 along broadcast dimensions), so nothing is expanded. Each element's
// index is split into coordinates, innermost dimension first. add_strided32 (out < 2**31
// elements) divides by multiplying with a precomputed magic number (3 instructions instead of
// a ~20-instruction 32-bit or ~70-instruction 64-bit division); add_strided64 divides plainly.
#include "../_elementwise/strided.cuh"

template <int PACK>
__device__ __forceinline__ void add_packs(const T* __restrict__ a, const T* __restrict__ b, T* __restrict__ out,
                                          float alpha, long long n) {
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
                va[i].v[k] = kz_from_float<T>(kz_to_float(va[i].v[k]) + alpha * kz_to_float(vb[i].v[k]));
            ob[p] = va[i].raw;
        }
    }
    // the n % PACK elements after the last whole pack, by block 0 (the grid has one at least)
    if (PACK > 1 && blockIdx.x == 0 && threadIdx.x < n - packs * PACK) {
        const long long j = packs * PACK + threadIdx.x;
        out[j] = kz_from_float<T>(kz_to_float(a[j]) + alpha * kz_to_float(b[j]));
    }
}

extern "C" __global__ void __launch_bounds__(THREADS)
add_vec(const T* a, const T* b, T* out, float alpha, long long n) {
    add_packs<VEC>(a, b, out, alpha, n);
}
extern "C" __global__ void __launch_bounds__(THREADS)
add_scalar(const T* a, const T* b, T* out, float alpha, long long n) {
    add_packs<1>(a, b, out, alpha, n);
}

template <bool WIDE>
__device__ __forceinline__ void add_dims(const T* __restrict__ a, const T* __restrict__ b, T* __restrict__ out,
                                         float alpha, long long n, int ndim, const Dim (&dims)[MAX_DIMS]) {
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
        if (index < n) out[index] = kz_from_float<T>(va[i] + alpha * vb[i]);
    }
}

extern "C" __global__ void __launch_bounds__(THREADS)
add_strided32(const T* a, const T* b, T* out, float alpha, long long n, LAYOUT_PARAMS) {
    const Dim dims[MAX_DIMS] = LAYOUT_DIMS;
    add_dims<false>(a, b, out, alpha, n, ndim, dims);
}
extern "C" __global__ void __launch_bounds__(THREADS)
add_strided64(const T* a, const T* b, T* out, float alpha, long long n, LAYOUT_PARAMS) {
    const Dim dims[MAX_DIMS] = LAYOUT_DIMS;
    add_dims<true>(a, b, out, alpha, n, ndim, dims);
}
