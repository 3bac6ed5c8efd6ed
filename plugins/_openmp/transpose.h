// kz_transpose16(dst, ldd, src, lds): dst[i][j] = src[j][i] for a 16 × 16 block of floats (row strides ldd and
// lds, in floats). With AVX-512: 16 row loads, four rounds of shuffles (32-bit, 64-bit, then 128-bit lanes
// twice), 16 row stores; elsewhere (or with KZ_PORTABLE) an element loop. Included by _flash/openmp.c (its K
// and V panels) and _gemm/gemm_openmp.h (B panels read along k).
#ifndef KZ_TRANSPOSE_H
#define KZ_TRANSPOSE_H
#if defined(__AVX512F__) && !defined(KZ_PORTABLE)
#include <immintrin.h>
#define KZ_TRANSPOSE16_AVX512 1

static inline void kz_transpose16(float *restrict dst, long long ldd, const float *restrict src, long long lds) {
    __m512 r[16], t[16];
    for (int i = 0; i < 16; ++i) r[i] = _mm512_loadu_ps(src + i * lds);
    for (int i = 0; i < 8; ++i) {
        t[2 * i] = _mm512_unpacklo_ps(r[2 * i], r[2 * i + 1]);
        t[2 * i + 1] = _mm512_unpackhi_ps(r[2 * i], r[2 * i + 1]);
    }
    for (int i = 0; i < 4; ++i) {
        const __m512d a = _mm512_castps_pd(t[4 * i]), b = _mm512_castps_pd(t[4 * i + 1]);
        const __m512d c = _mm512_castps_pd(t[4 * i + 2]), e = _mm512_castps_pd(t[4 * i + 3]);
        r[4 * i] = _mm512_castpd_ps(_mm512_unpacklo_pd(a, c));
        r[4 * i + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(a, c));
        r[4 * i + 2] = _mm512_castpd_ps(_mm512_unpacklo_pd(b, e));
        r[4 * i + 3] = _mm512_castpd_ps(_mm512_unpackhi_pd(b, e));
    }
    for (int i = 0; i < 2; ++i)
        for (int j = 0; j < 4; ++j) {
            t[8 * i + j] = _mm512_shuffle_f32x4(r[8 * i + j], r[8 * i + j + 4], 0x88);
            t[8 * i + j + 4] = _mm512_shuffle_f32x4(r[8 * i + j], r[8 * i + j + 4], 0xdd);
        }
    for (int j = 0; j < 8; ++j) {
        r[j] = _mm512_shuffle_f32x4(t[j], t[j + 8], 0x88);
        r[j + 8] = _mm512_shuffle_f32x4(t[j], t[j + 8], 0xdd);
    }
    for (int i = 0; i < 16; ++i) _mm512_storeu_ps(dst + i * ldd, r[i]);
}
#else
static inline void kz_transpose16(float *restrict dst, long long ldd, const float *restrict src, long long lds) {
    for (int i = 0; i < 16; ++i)
        for (int j = 0; j < 16; ++j) dst[i * ldd + j] = src[j * lds + i];
}
#endif
#endif
