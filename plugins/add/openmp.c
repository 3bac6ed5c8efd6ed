// out = a + alpha * b over float arrays.
//
// add_contiguous: a, b and out are dense arrays of n elements; one parallel, vectorised loop.
// add_strided: out is dense over `ndim` merged dimensions (outermost first); a and b are read
// at their own strides, 0 along broadcast dimensions, so nothing is expanded. Each thread
// takes one equal, contiguous range of out, turns its start into coordinates once, then
// walks it a run of the innermost dimension at a time.
#include "../_openmp/parallel.h"
#include <omp.h>

#define MAX_DIMS 6

void add_contiguous(const float *restrict a, const float *restrict b, float *restrict out, float alpha,
                    long long n, int threads) {
    #pragma omp parallel for simd num_threads(threads) schedule(static) if (parallel: n >= PARALLEL_MIN)
    for (long long i = 0; i < n; ++i) {
        out[i] = a[i] + alpha * b[i];
    }
}

// One run along the innermost dimension. Inlined with constant strides below, so the
// common ones (1 and 0: dense, broadcast) become plain vector loads and broadcasts.
static inline void add_run(const float *restrict a, long long sa, const float *restrict b, long long sb,
                           float *restrict out, float alpha, long long len) {
    #pragma omp simd
    for (long long j = 0; j < len; ++j) {
        out[j] = a[j * sa] + alpha * b[j * sb];
    }
}

void add_strided(const float *restrict a, const float *restrict b, float *restrict out, float alpha, int ndim,
                 const long long *sizes, const long long *a_strides, const long long *b_strides, int threads) {
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
            if (sa == 1 && sb == 1) add_run(a + ao, 1, b + bo, 1, out + i, alpha, len);
            else if (sa == 1 && sb == 0) add_run(a + ao, 1, b + bo, 0, out + i, alpha, len);
            else if (sa == 0 && sb == 1) add_run(a + ao, 0, b + bo, 1, out + i, alpha, len);
            else add_run(a + ao, sa, b + bo, sb, out + i, alpha, len);
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
