// dst[...] = src over float arrays; values are moved, never computed (bit-exact).
//
// copy_contiguous: dst and src are dense arrays of n elements; one parallel, vectorised loop.
// copy_strided: over `ndim` merged dimensions (outermost first, ordered by dst's strides), dst and
// src each at their own strides (src's 0 where broadcast). Each thread takes one equal, contiguous
// range of the iteration, turns its start into coordinates once, then walks it a run of the
// innermost dimension at a time. A transposing copy (dst dense along the innermost dimension, src
// along the next one: making a transposed tensor contiguous) goes by TILE x TILE tiles instead: element
// by element every read is a cache miss, several times slower.
#include <omp.h>

#define MAX_DIMS 6
// Below this many elements one thread does it all: waking a team costs a few microseconds, about
// what one core takes to copy 64k floats.
#define PARALLEL_MIN 65536
// a tile's buffer: 64 x 64 floats, 16 KiB of L1 (32 x 32 tiles without the buffer were slower)
#define TILE 64

void copy_contiguous(float *restrict dst, const float *restrict src, long long n, int threads) {
    #pragma omp parallel for simd num_threads(threads) schedule(static) if (parallel: n >= PARALLEL_MIN)
    for (long long i = 0; i < n; ++i) {
        dst[i] = src[i];
    }
}

// One run along the innermost dimension. Inlined with constant strides below, so the common
// ones become plain vector moves: 1 and 1 (a dense run), 1 and 0 (a fill), and dense stores of a
// strided gather (a sliced src).
static inline void copy_run(float *restrict dst, long long sd, const float *restrict src, long long ss,
                            long long len) {
    #pragma omp simd
    for (long long j = 0; j < len; ++j) {
        dst[j * sd] = src[j * ss];
    }
}

// dst[.., r, c] = src[.., r, c] with dst's stride 1 along c and src's along r, tile by tile: the tile
// is read along src's runs into a buffer, then written along dst's from it. (Straight from src, the
// TILE columns of a power-of-two stride apart fall into the same few L1 sets.)
static void copy_tiles(float *restrict dst, const float *restrict src, int ndim, const long long *sizes,
                       const long long *dst_strides, const long long *src_strides, long long n, int threads) {
    const long long rows = sizes[ndim - 2], cols = sizes[ndim - 1];
    const long long dr = dst_strides[ndim - 2], sc = src_strides[ndim - 1];
    const long long row_tiles = (rows + TILE - 1) / TILE, col_tiles = (cols + TILE - 1) / TILE;
    const long long per_matrix = row_tiles * col_tiles, tiles = n / (rows * cols) * per_matrix;
    #pragma omp parallel for num_threads(threads) schedule(static) if (n >= PARALLEL_MIN)
    for (long long t = 0; t < tiles; ++t) {
        long long rest = t / per_matrix, dof = 0, sof = 0;  // the outer dimensions' offsets
        for (int d = ndim - 3; d >= 0; --d) {
            const long long coord = rest % sizes[d];
            rest /= sizes[d];
            dof += coord * dst_strides[d];
            sof += coord * src_strides[d];
        }
        const long long r0 = t % per_matrix / col_tiles * TILE, c0 = t % per_matrix % col_tiles * TILE;
        const long long r1 = r0 + TILE < rows ? r0 + TILE : rows, c1 = c0 + TILE < cols ? c0 + TILE : cols;
        float buffer[TILE][TILE];  // [c - c0][r - r0]
        for (long long c = c0; c < c1; ++c) {
            for (long long r = r0; r < r1; ++r) buffer[c - c0][r - r0] = src[sof + r + c * sc];
        }
        for (long long r = r0; r < r1; ++r) {
            for (long long c = c0; c < c1; ++c) dst[dof + r * dr + c] = buffer[c - c0][r - r0];
        }
    }
}

void copy_strided(float *restrict dst, const float *restrict src, int ndim, const long long *sizes,
                  const long long *dst_strides, const long long *src_strides, int threads) {
    long long n = 1;
    for (int d = 0; d < ndim; ++d) n *= sizes[d];
    const int inner = ndim - 1;
    const long long sd = dst_strides[inner], ss = src_strides[inner];
    if (ndim >= 2 && sd == 1 && ss != 1 && src_strides[inner - 1] == 1) {
        copy_tiles(dst, src, ndim, sizes, dst_strides, src_strides, n, threads);
        return;
    }
    #pragma omp parallel num_threads(threads) if (n >= PARALLEL_MIN)
    {
        const long long nt = omp_get_num_threads(), t = omp_get_thread_num();
        const long long start = n / nt * t + (t < n % nt ? t : n % nt);
        const long long end = start + n / nt + (t < n % nt);
        long long coord[MAX_DIMS], dof = 0, sof = 0, rest = start;
        for (int d = inner; d >= 0; --d) {
            coord[d] = rest % sizes[d];
            rest /= sizes[d];
            dof += coord[d] * dst_strides[d];
            sof += coord[d] * src_strides[d];
        }
        for (long long i = start; i < end;) {
            long long len = sizes[inner] - coord[inner];
            if (len > end - i) len = end - i;
            if (sd == 1 && ss == 1) copy_run(dst + dof, 1, src + sof, 1, len);
            else if (sd == 1 && ss == 0) copy_run(dst + dof, 1, src + sof, 0, len);
            else if (sd == 1) copy_run(dst + dof, 1, src + sof, ss, len);
            else copy_run(dst + dof, sd, src + sof, ss, len);
            i += len;
            coord[inner] += len;
            dof += len * sd;
            sof += len * ss;
            // carry into the outer dimensions (past the last run this only touches coord)
            for (int d = inner; d > 0 && coord[d] == sizes[d]; --d) {
                coord[d] = 0;
                dof += dst_strides[d - 1] - sizes[d] * dst_strides[d];
                sof += src_strides[d - 1] - sizes[d] * src_strides[d];
                ++coord[d - 1];
            }
        }
    }
}
