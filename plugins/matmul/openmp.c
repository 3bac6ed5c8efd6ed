// Cache-blocked float32 GEMM (the BLIS loop nest): C[b] = A[b] @ B[b] for every batch b.
//
//   for jc over N by nc:            B block kc×nc packed once (L3)
//     for pc over K by kc:
//       for ic over M by mc:          A block mc×kc packed (L2)
//         for each NR-column panel and MR-row panel:
//           micro-kernel: an MR×NR tile of C in registers, kc rank-1 updates (B panel in L1)
//
// Threads take whole products of a batch when there are enough of them; otherwise they share each
// product: B blocks packed together, then (row block, panel group) tasks handed out dynamically.
//
// Packing reads A and B through their strides (transposed or sliced views need no copy) and
// lays them out as the micro-kernel streams them: A in MR-row panels (k-major), B in NR-column
// panels (k-major), tails zero-padded, so the micro-kernel always runs full MR×NR tiles and only
// the store is masked. Padding touches padded rows/columns of C only, which are never stored.
// MR and NR shape the register tile and are compile-time; mc, nc, kc are run-time arguments.
#include <stdlib.h>
#include <string.h>

#include <omp.h>

#ifndef MR
#define MR 6
#endif
#ifndef NR
#define NR 32
#endif
#ifndef TASKS
#define TASKS 4
#endif

typedef long long i64;

static i64 min_i64(i64 a, i64 b) { return a < b ? a : b; }
static i64 round_up(i64 x, i64 to) { return (x + to - 1) / to * to; }

// A block (mc×kc, at a) -> MR-row panels: ap[panel][p][i] = a[(panel*MR+i)*sam + p*sak], zero past mc.
static void pack_a(const float *a, i64 sam, i64 sak, i64 mc, i64 kc, float *restrict ap) {
    for (i64 i0 = 0; i0 < mc; i0 += MR) {
        i64 rows = min_i64(MR, mc - i0);
        for (i64 p = 0; p < kc; ++p) {
            for (i64 i = 0; i < rows; ++i) ap[p * MR + i] = a[(i0 + i) * sam + p * sak];
            for (i64 i = rows; i < MR; ++i) ap[p * MR + i] = 0.0f;
        }
        ap += kc * MR;
    }
}

// B block (kc×nc, at b) -> NR-column panels: bp[panel][p][j] = b[p*sbk + (panel*NR+j)*sbn], zero past nc.
static void pack_b_panel(const float *b, i64 sbk, i64 sbn, i64 cols, i64 kc, float *restrict bp) {
    for (i64 p = 0; p < kc; ++p) {
        const float *row = b + p * sbk;
        if (sbn == 1 && cols == NR) {
            memcpy(bp + p * NR, row, sizeof(float) * NR);
            continue;
        }
        for (i64 j = 0; j < cols; ++j) bp[p * NR + j] = row[j * sbn];
        for (i64 j = cols; j < NR; ++j) bp[p * NR + j] = 0.0f;
    }
}

// One MR×NR tile: acc = ap-panel @ bp-panel over kc; C = acc (first K block) or C += acc.
// The j loop is NR wide with constant bounds: gcc keeps acc in MR·NR/16 zmm (or /8 ymm) registers. C's rows
// are prefetched first and the update loop is unrolled by 4, as in ../linear/gemm_openmp.h (1024³ on an
// AVX-512 Intel Xeon: 184 -> 198 GFLOP/s on one thread, 333 -> 350-355 on two; torch 210 and 410).
static inline void micro_kernel(i64 kc, const float *restrict ap, const float *restrict bp,
                                float *restrict c, i64 ldc, i64 rows, i64 cols, int first) {
    float acc[MR][NR] = {{0.0f}};
#pragma GCC unroll 16
    for (int i = 0; i < MR; ++i)
        for (int j = 0; j < NR; j += 16) __builtin_prefetch(c + i * ldc + j, 1, 3);
#pragma GCC unroll 4
    for (i64 p = 0; p < kc; ++p) {
        const float *restrict bk = bp + p * NR;
#pragma GCC unroll 16
        for (int i = 0; i < MR; ++i) {
            float ai = ap[p * MR + i];
#pragma omp simd
            for (int j = 0; j < NR; ++j) acc[i][j] += ai * bk[j];
        }
    }
    if (rows == MR && cols == NR) {
#pragma GCC unroll 16
        for (int i = 0; i < MR; ++i) {
            float *ci = c + i * ldc;
#pragma omp simd
            for (int j = 0; j < NR; ++j) ci[j] = first ? acc[i][j] : ci[j] + acc[i][j];
        }
        return;
    }
    for (i64 i = 0; i < rows; ++i)
        for (i64 j = 0; j < cols; ++j) c[i * ldc + j] = first ? acc[i][j] : c[i * ldc + j] + acc[i][j];
}

// Rows [0, mcur) of the block at a (k offset applied) times packed B panels [jp0, jp1) into c (the block's
// top-left corner): pack the A block, then one micro-kernel per MR×NR tile.
static void block_product(const float *a, i64 sam, i64 sak, i64 mcur, i64 kcur, const float *bp, i64 ncur,
                          i64 jp0, i64 jp1, float *ap, float *c, i64 ldc, int first) {
    pack_a(a, sam, sak, mcur, kcur, ap);
    for (i64 jp = jp0; jp < jp1; ++jp)
        for (i64 ip = 0; ip * MR < mcur; ++ip)
            micro_kernel(kcur, ap + ip * MR * kcur, bp + jp * NR * kcur, c + ip * MR * ldc + jp * NR, ldc,
                         min_i64(MR, mcur - ip * MR), min_i64(NR, ncur - jp * NR), first);
}

// One product on the calling thread, with its own packing buffers.
static void gemm_serial(const float *a, const float *b, float *c, i64 m, i64 n, i64 k, i64 sam, i64 sak,
                        i64 sbk, i64 sbn, i64 mc, i64 nc, i64 kc, float *ap, float *bp) {
    for (i64 jc = 0; jc < n; jc += nc) {
        i64 ncur = min_i64(nc, n - jc), panels = (ncur + NR - 1) / NR;
        for (i64 pc = 0; pc < k; pc += kc) {
            i64 kcur = min_i64(kc, k - pc);
            for (i64 jp = 0; jp < panels; ++jp)
                pack_b_panel(b + pc * sbk + (jc + jp * NR) * sbn, sbk, sbn, min_i64(NR, ncur - jp * NR), kcur,
                             bp + jp * NR * kcur);
            for (i64 ic = 0; ic < m; ic += mc)
                block_product(a + ic * sam + pc * sak, sam, sak, min_i64(mc, m - ic), kcur, bp, ncur, 0, panels,
                              ap, c + ic * n + jc, n, pc == 0);
        }
    }
}

// One product on all threads: each B block is packed once, together, then shared; the threads take
// (row block, panel group) tasks.
static void gemm_shared(const float *a, const float *b, float *c, i64 m, i64 n, i64 k, i64 sam, i64 sak,
                        i64 sbk, i64 sbn, i64 mc, i64 nc, i64 kc, float *ap, float *bp, i64 groups) {
    for (i64 jc = 0; jc < n; jc += nc) {
        i64 ncur = min_i64(nc, n - jc), panels = (ncur + NR - 1) / NR;
        i64 per_group = (panels + groups - 1) / groups;
        for (i64 pc = 0; pc < k; pc += kc) {
            i64 kcur = min_i64(kc, k - pc);
#pragma omp for schedule(static)
            for (i64 jp = 0; jp < panels; ++jp)
                pack_b_panel(b + pc * sbk + (jc + jp * NR) * sbn, sbk, sbn, min_i64(NR, ncur - jp * NR), kcur,
                             bp + jp * NR * kcur);
            // the barrier closing each omp for: B is packed before use, and used before repacked
#pragma omp for schedule(dynamic) collapse(2)
            for (i64 ic = 0; ic < m; ic += mc) {
                for (i64 g = 0; g < groups; ++g) {
                    i64 jp0 = g * per_group, jp1 = min_i64(panels, jp0 + per_group);
                    if (jp0 < jp1)  // else more groups than panels
                        block_product(a + ic * sam + pc * sak, sam, sak, min_i64(mc, m - ic), kcur, bp, ncur, jp0,
                                      jp1, ap, c + ic * n + jc, n, pc == 0);
                }
            }
        }
    }
}

// Returns 0, or -1 when the packing buffers cannot be allocated.
int matmul(const float *a, const float *b, float *c, i64 batch, i64 m, i64 n, i64 k, i64 sab, i64 sam, i64 sak,
           i64 sbb, i64 sbk, i64 sbn, i64 mc, i64 nc, i64 kc, int threads) {
    if (k == 0) {  // an empty sum: zeros, and nothing to pack
        memset(c, 0, sizeof(float) * (size_t)(batch * m * n));
        return 0;
    }
    mc = round_up(min_i64(mc, m), MR);
    nc = round_up(min_i64(nc, n), NR);
    kc = min_i64(kc, k);
    // At least one product per thread: each thread takes whole products, with no barrier at all.
    // Otherwise the threads share each product (and one packed B buffer).
    int per_product = batch >= threads;
    size_t a_floats = round_up(mc * kc, 16), b_floats = round_up(nc * kc, 16);  // 64-byte multiples
    float *ap_all = aligned_alloc(64, sizeof(float) * a_floats * threads);
    float *bp_all = aligned_alloc(64, sizeof(float) * b_floats * (per_product ? threads : 1));
    if (ap_all == NULL || bp_all == NULL) {
        free(ap_all);
        free(bp_all);
        return -1;
    }
    if (per_product) {
#pragma omp parallel for num_threads(threads) schedule(dynamic)
        for (i64 bi = 0; bi < batch; ++bi) {
            int t = omp_get_thread_num();
            gemm_serial(a + bi * sab, b + bi * sbb, c + bi * m * n, m, n, k, sam, sak, sbk, sbn, mc, nc, kc,
                        ap_all + a_floats * t, bp_all + b_floats * t);
        }
    } else {
        // Fewer row blocks than TASKS per thread (small M): split each B block's panels into groups too,
        // so that the threads share the work evenly (3 row blocks on 2 threads would leave one idle 1/3)
        i64 ic_blocks = (m + mc - 1) / mc, want = (i64)TASKS * threads;
        i64 groups = ic_blocks >= want ? 1 : (want + ic_blocks - 1) / ic_blocks;
#pragma omp parallel num_threads(threads)
        for (i64 bi = 0; bi < batch; ++bi)
            gemm_shared(a + bi * sab, b + bi * sbb, c + bi * m * n, m, n, k, sam, sak, sbk, sbn, mc, nc, kc,
                        ap_all + a_floats * omp_get_thread_num(), bp_all, groups);
    }
    free(ap_all);
    free(bp_all);
    return 0;
}
