
#define KZ_INF __int_as_float(0x7f800000)
struct __align__(2) kz_half { unsigned short x; };
struct __align__(2) kz_bf16 { unsigned short x; };
struct __align__(4) kz_h2 { kz_half x, y; };
struct __align__(4) kz_bf2 { kz_bf16 x, y; };

__device__ __forceinline__ float kz_to_float(float v) { return v; }
__device__ __forceinline__ float kz_to_float(kz_half v) {
  float f;
  asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(v.x));
  return f;
}
__device__ __forceinline__ float kz_to_float(kz_bf16 v) { return __uint_as_float((unsigned)v.x << 16); }

/* KzT, not T: kernels #define T */
template <class KzT> __device__ KzT kz_from_float(float f);
template <> __device__ __forceinline__ float kz_from_float<float>(float f) { return f; }
template <> __device__ __forceinline__ kz_half kz_from_float<kz_half>(float f) {
  kz_half h;
  asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h.x) : "f"(f));
  return h;
}
template <> __device__ __forceinline__ kz_bf16 kz_from_float<kz_bf16>(float f) {
  kz_bf16 h;
#if __CUDA_ARCH__ >= 800
  asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(h.x) : "f"(f));
#else /* no bf16 cvt before sm_80: round to nearest even by hand, keeping a NaN a NaN */
  unsigned u = __float_as_uint(f);
  h.x = (u & 0x7fffffffu) > 0x7f800000u ? (unsigned short)((u >> 16) | 0x40u)
                                        : (unsigned short)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
#endif
  return h;
}

__device__ __forceinline__ float2 kz_to_float2(kz_h2 v) {
  return make_float2(kz_to_float(v.x), kz_to_float(v.y));
}
__device__ __forceinline__ float2 kz_to_float2(kz_bf2 v) {
  return make_float2(kz_to_float(v.x), kz_to_float(v.y));
}
template <class KzT2> __device__ KzT2 kz_from_float2(float2 f);
template <> __device__ __forceinline__ kz_h2 kz_from_float2<kz_h2>(float2 f) {
  return kz_h2{kz_from_float<kz_half>(f.x), kz_from_float<kz_half>(f.y)};
}
template <> __device__ __forceinline__ kz_bf2 kz_from_float2<kz_bf2>(float2 f) {
  return kz_bf2{kz_from_float<kz_bf16>(f.x), kz_from_float<kz_bf16>(f.y)};
}

__device__ __forceinline__ void kz_wait_prior_grids() {
#if __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}
__device__ __forceinline__ void kz_launch_dependents() {
#if __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}
