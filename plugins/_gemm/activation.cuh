// The activation of a GEMM's epilogue (linear's activation=) and its derivative, in float, as
// plugins/_gemm/activation.py defines them; KZ_ACTIVATION selects one by activation.py's CODES: 0 none
// (the default), 1 relu, 2 gelu, 3 gelu_tanh. CUDA's erff, expf and tanhf (2 ulp; not the fast intrinsics).
#ifndef KZ_ACTIVATION_CUH
#define KZ_ACTIVATION_CUH
#ifndef KZ_ACTIVATION
#define KZ_ACTIVATION 0
#endif

#define KZ_SQRT_HALF 0.70710678118654752f
#define KZ_SQRT_2_OVER_PI 0.79788456080286536f
#define KZ_INV_SQRT_2PI 0.39894228040143268f
#define KZ_KAPPA 0.044715f

__device__ __forceinline__ float activate(float z) {
#if KZ_ACTIVATION == 1
  return z < 0.0f ? 0.0f : z;  // NaN stays NaN
#elif KZ_ACTIVATION == 2
  return 0.5f * z * (1.0f + erff(z * KZ_SQRT_HALF));
#elif KZ_ACTIVATION == 3
  return 0.5f * z * (1.0f + tanhf(KZ_SQRT_2_OVER_PI * (z + KZ_KAPPA * z * z * z)));
#else
  return z;
#endif
}

// g·act'(p); for relu p may be z or relu(z) (torch's threshold_backward: 0 where p <= 0, NaN passes g).
__device__ __forceinline__ float activation_grad(float g, float p) {
#if KZ_ACTIVATION == 1
  return p <= 0.0f ? 0.0f : g;
#elif KZ_ACTIVATION == 2
  return g * (0.5f * (1.0f + erff(p * KZ_SQRT_HALF)) + p * expf(-0.5f * p * p) * KZ_INV_SQRT_2PI);
#elif KZ_ACTIVATION == 3
  const float t = tanhf(KZ_SQRT_2_OVER_PI * (p + KZ_KAPPA * p * p * p));
  return g * (0.5f * (1.0f + t) + 0.5f * p * (1.0f - t * t) * KZ_SQRT_2_OVER_PI * (1.0f + 3.0f * KZ_KAPPA * p * p));
#else
  return g;
#endif
}
#endif
