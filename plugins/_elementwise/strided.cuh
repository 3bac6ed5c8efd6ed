// What the elementwise kernels of binary ops (binary.cuh) and copy_ share: 16-byte packs of T and the
// walk of a merged broadcast layout (kernelzoo.elementwise.layout) of two operands; their launch shape
// (ITEMS, THREADS) is ../_cuda/streaming.cuh's.
#define MAX_DIMS 6

#include "../_cuda/streaming.cuh"

// 16-byte accesses: 4 floats or 8 halves
#define VEC (16 / (int)sizeof(T))

// Dimension d (0 = innermost) of the merged layout: its size, the magic number and shift that
// divide by it (q = (umulhi(i, magic) + i) >> shift for 0 <= i < 2**31; computed by the wrapper,
// _elementwise/cuda.py's divider), and the strides of operands 0 and 1 along it (in elements; 0 where broadcast).
// Unused dimensions: size 1, strides 0.
#define DIM_PARAMS(d) long long size##d, unsigned magic##d, unsigned shift##d, long long stride0_##d, \
                      long long stride1_##d
#define DIM_FIELDS(d) {size##d, magic##d, shift##d, {stride0_##d, stride1_##d}}
#define LAYOUT_PARAMS int ndim, DIM_PARAMS(0), DIM_PARAMS(1), DIM_PARAMS(2), DIM_PARAMS(3), DIM_PARAMS(4), \
                      DIM_PARAMS(5)
#define LAYOUT_DIMS {DIM_FIELDS(0), DIM_FIELDS(1), DIM_FIELDS(2), DIM_FIELDS(3), DIM_FIELDS(4), DIM_FIELDS(5)}

struct Dim {
    long long size;
    unsigned magic, shift;
    long long stride[2];
};

// The offsets of element `index` (row-major over the layout's sizes) in operands 0 and 1: the
// index is split into coordinates, innermost dimension first. WIDE (2**31 elements or more)
// divides plainly in 64 bits (~70 instructions); otherwise the index fits 32 bits and each
// division is a multiply-high, an add and a shift with the wrapper's magic number (a 32-bit
// division would take ~20).
template <bool WIDE>
__device__ __forceinline__ void layout_offsets(long long index, int ndim, const Dim (&dims)[MAX_DIMS],
                                               long long& offset0, long long& offset1) {
    offset0 = offset1 = 0;
    if (WIDE) {
        long long rest = index;
#pragma unroll
        for (int d = 0; d < MAX_DIMS; ++d) {
            if (d < ndim) {
                const long long q = rest / dims[d].size, coord = rest - q * dims[d].size;
                offset0 += coord * dims[d].stride[0];
                offset1 += coord * dims[d].stride[1];
                rest = q;
            }
        }
    } else {
        unsigned rest = (unsigned)index;
#pragma unroll
        for (int d = 0; d < MAX_DIMS; ++d) {
            if (d < ndim) {
                const unsigned q = (__umulhi(rest, dims[d].magic) + rest) >> dims[d].shift;
                const unsigned coord = rest - q * (unsigned)dims[d].size;
                offset0 += (long long)coord * dims[d].stride[0];
                offset1 += (long long)coord * dims[d].stride[1];
                rest = q;
            }
        }
    }
}
