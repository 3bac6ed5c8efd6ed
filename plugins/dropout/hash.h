// The keep hash of dropout that plugins/dropout/__init__.py defines, shared by its C and CUDA kernels:
// lowbias32 mixes over 32-bit unsigned arithmetic, which wraps in C and CUDA alike.
#ifndef KZ_DROPOUT_HASH_H
#define KZ_DROPOUT_HASH_H
#ifdef __CUDACC__
#define KZ_HASH_FN __device__ __forceinline__
#else
#define KZ_HASH_FN static inline
#endif

#define GOLDEN 0x9e3779b9u

KZ_HASH_FN unsigned mix(unsigned v) {  // lowbias32
    v ^= v >> 16;
    v *= 0x7feb352du;
    v ^= v >> 15;
    v *= 0x846ca68bu;
    v ^= v >> 16;
    return v;
}

// The first round key of a seed; the second is mix(k1 + GOLDEN).
KZ_HASH_FN unsigned dropout_key(unsigned seed_lo, unsigned seed_hi) { return mix(seed_hi ^ mix(seed_lo + GOLDEN)); }

// The hash of element `index`: it is kept when hash >> 8 is at least the threshold.
KZ_HASH_FN unsigned dropout_hash(unsigned long long index, unsigned k1, unsigned k2) {
    return mix(mix((unsigned)index ^ k1) ^ k2 ^ ((unsigned)(index >> 32) * GOLDEN));
}
#endif
