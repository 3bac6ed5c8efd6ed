// relu over a contiguous array of T (float, kz_half or kz_bf16; see the backend's PRELUDE).
// Each thread handles ITEMS elements spaced blockDim.x apart: loads stay coalesced and
// ITEMS independent loads are in flight before the first store.
#ifndef ITEMS
#define ITEMS 4
#endif

extern "C" __global__ void relu(const T* __restrict__ x, T* __restrict__ y, long long n) {
    long long base = (long long)blockIdx.x * blockDim.x * ITEMS + threadIdx.x;
    float v[ITEMS];
#pragma unroll
    for (int i = 0; i < ITEMS; ++i) {
        long long j = base + (long long)i * blockDim.x;
        v[i] = j < n ? kz_to_float(x[j]) : 0.0f;
    }
#pragma unroll
    for (int i = 0; i < ITEMS; ++i) {
        long long j = base + (long long)i * blockDim.x;
        if (j < n) y[j] = kz_from_float<T>(v[i] < 0.0f ? 0.0f : v[i]);  // NaN < 0 is false: NaN stays
    }
}
