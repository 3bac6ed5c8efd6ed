// The functions of every binary elementwise op over float arrays: out = KZ_BINARY_OP(a, b). An op's
// openmp.c defines, before including this file,
//     KZ_BINARY_OP(a, b)       the expression, of two floats,
//     KZ_BINARY_NAME(suffix)   the functions' names, e.g. mul_##suffix,
// and may define KZ_BINARY_OP16(a, b), the expression of 16 lanes in AVX-512 (see NAME(contiguous)),
// and KZ_BINARY_PARAMS / KZ_BINARY_ARGS, scalar parameters of the functions after `out` and the same
// names as arguments, each with a leading comma, which the expressions may use (add's `, float alpha`
// and `, alpha`). It may include it again with other definitions (gelu_backward does, once per
// formula): all are undefined at the end of the file.
//
// NAME(contiguous): a, b and out are dense arrays of n elements; one parallel, vectorised loop.
// NAME(strided): out is dense over `ndim` merged dimensions (outermost first); a and b are read
// at their own strides, 0 along broadcast dimensions, so nothing is expanded. Each thread takes
// one equal, contiguous range of out, turns its start into coordinates once, then walks it a run
// of the innermost dimension at a time.
#include <omp.h>

#ifndef KZ_BINARY_OPENMP_CONSTANTS
#define KZ_BINARY_OPENMP_CONSTANTS
#define MAX_DIMS 6
#endif
#include "../_openmp/parallel.h"
#ifndef KZ_BINARY_PARAMS
#define KZ_BINARY_PARAMS
#define KZ_BINARY_ARGS
#endif

#if defined(KZ_BINARY_OP16) && defined(KZ_VECTOR16)
// KZ_BINARY_OP16(a, b): the same expression of 16 lanes in AVX-512 (an op may define it, after including
// vector_math.h), for whole vectors; KZ_BINARY_OP for the last n % 16 elements.
void KZ_BINARY_NAME(contiguous)(const float *restrict a, const float *restrict b, float *restrict out KZ_BINARY_PARAMS,
                                long long n, int threads) {
    const long long vectors = n / 16;
    #pragma omp parallel for num_threads(threads) schedule(static) if (n >= PARALLEL_MIN)
    for (long long v = 0; v < vectors; ++v) {
        _mm512_storeu_ps(out + 16 * v, KZ_BINARY_OP16(_mm512_loadu_ps(a + 16 * v), _mm512_loadu_ps(b + 16 * v)));
    }
    for (long long i = 16 * vectors; i < n; ++i) {
        out[i] = KZ_BINARY_OP(a[i], b[i]);
    }
}
#else
void KZ_BINARY_NAME(contiguous)(const float *restrict a, const float *restrict b, float *restrict out KZ_BINARY_PARAMS,
                                long long n, int threads) {
    #pragma omp parallel for simd num_threads(threads) schedule(static) if (parallel: n >= PARALLEL_MIN)
    for (long long i = 0; i < n; ++i) {
        out[i] = KZ_BINARY_OP(a[i], b[i]);
    }
}
#endif

// One run along the innermost dimension. Inlined with constant strides below, so the common
// ones (1 and 0: dense, broadcast) become plain vector loads and broadcasts.
static inline void KZ_BINARY_NAME(run)(const float *restrict a, long long sa, const float *restrict b, long long sb,
                                       float *restrict out KZ_BINARY_PARAMS, long long len) {
    #pragma omp simd
    for (long long j = 0; j < len; ++j) {
        out[j] = KZ_BINARY_OP(a[j * sa], b[j * sb]);
    }
}

void KZ_BINARY_NAME(strided)(const float *restrict a, const float *restrict b, float *restrict out KZ_BINARY_PARAMS,
                             int ndim, const long long *sizes, const long long *a_strides,
                             const long long *b_strides, int threads) {
    long long n = 1;
    for (int d = 0; d < ndim; ++d) n *= sizes[d];
    const int inner = ndim - 1;
    const long long sa = a_strides[inner], sb = b_strides[inner];
    #pragma omp parallel num_threads(threads) if (n >= PARALLEL_MIN)
    {
        const long long nt = omp_get_num_threads(), t = omp_get_thread_num();
        const long long start = n / nt * t + (t < n % nt ? t : n % nt);
        const long long end = start + n / nt + (t < n % nt);
        long long coord[MAX_DIMS], ao = 0, bo = 0, rest = start;
        for (int d = inner; d >= 0; --d) {
            coord[d] = rest % sizes[d];
            rest /= sizes[d];
            ao += coord[d] * a_strides[d];
            bo += coord[d] * b_strides[d];
        }
        for (long long i = start; i < end;) {
            long long len = sizes[inner] - coord[inner];
            if (len > end - i) len = end - i;
            if (sa == 1 && sb == 1) KZ_BINARY_NAME(run)(a + ao, 1, b + bo, 1, out + i KZ_BINARY_ARGS, len);
            else if (sa == 1 && sb == 0) KZ_BINARY_NAME(run)(a + ao, 1, b + bo, 0, out + i KZ_BINARY_ARGS, len);
            else if (sa == 0 && sb == 1) KZ_BINARY_NAME(run)(a + ao, 0, b + bo, 1, out + i KZ_BINARY_ARGS, len);
            else KZ_BINARY_NAME(run)(a + ao, sa, b + bo, sb, out + i KZ_BINARY_ARGS, len);
            i += len;
            coord[inner] += len;
            ao += len * sa;
            bo += len * sb;
            // carry into the outer dimensions (past the last run this only touches coord)
            for (int d = inner; d > 0 && coord[d] == sizes[d]; --d) {
                coord[d] = 0;
                ao += a_strides[d - 1] - sizes[d] * a_strides[d];
                bo += b_strides[d - 1] - sizes[d] * b_strides[d];
                ++coord[d - 1];
            }
        }
    }
}

#undef KZ_BINARY_OP
#undef KZ_BINARY_OP16
#undef KZ_BINARY_NAME
#undef KZ_BINARY_PARAMS
#undef KZ_BINARY_ARGS
