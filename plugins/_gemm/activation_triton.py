"""The activations of the Triton GEMM's epilogue (linear's activation=) and their derivatives, in float32, as
plugins/_gemm/activation.py defines them, by its CODES (0 none, 1 relu, 2 gelu, 3 gelu_tanh); and the two
elementwise passes linear's plugin needs beside the GEMM: y = act(z) from a stored z, dz = g·act'(pre).

erf is tl.math.erf. tanh, which neither Triton 3.6's tl.math nor its interpreter has, is written through exp as
the gelu op's kernel writes it: 0.5·z·(1 + tanh(u)) = z / (1 + exp(-2u)), and in the derivative
tanh(u) = 1 - 2 / (1 + exp(2u)); both give torch's infinities and NaN.
"""

from __future__ import annotations

import math

import triton
import triton.language as tl

_SQRT_HALF = tl.constexpr(math.sqrt(0.5))
_SQRT_2_OVER_PI = tl.constexpr(math.sqrt(2.0 / math.pi))
_MINUS_2_SQRT_2_OVER_PI = tl.constexpr(-2.0 * math.sqrt(2.0 / math.pi))
_INV_SQRT_2PI = tl.constexpr(1.0 / math.sqrt(2.0 * math.pi))
_KAPPA = tl.constexpr(0.044715)
_KAPPA_3 = tl.constexpr(3.0 * 0.044715)
# (constants go right of a tensor: constexpr * tensor is no tensor in the interpreter)


@triton.jit
def activate(z, ACTIVATION: tl.constexpr):
    # act(z) of a float32 tensor (one return: Triton compiles every return of a function it inlines)
    if ACTIVATION == 1:
        z = tl.where(z < 0.0, 0.0, z)  # NaN < 0 is false: NaN stays
    elif ACTIVATION == 2:
        z = 0.5 * z * (1.0 + tl.math.erf(z * _SQRT_HALF))
    elif ACTIVATION == 3:
        z = z / (1.0 + tl.exp((z + z * z * z * _KAPPA) * _MINUS_2_SQRT_2_OVER_PI))
    return z


@triton.jit
def activation_grad(g, p, ACTIVATION: tl.constexpr):
    # g·act'(p) of float32 tensors; for relu p may be z or relu(z) (torch's threshold_backward: NaN passes g)
    if ACTIVATION == 1:
        g = tl.where(p <= 0.0, 0.0, g)
    elif ACTIVATION == 2:
        g = g * (0.5 * (1.0 + tl.math.erf(p * _SQRT_HALF)) + p * tl.exp(p * p * -0.5) * _INV_SQRT_2PI)
    elif ACTIVATION == 3:
        t = 1.0 - 2.0 / (1.0 + tl.exp((p + p * p * p * _KAPPA) * _SQRT_2_OVER_PI * 2.0))
        g = g * (0.5 * (1.0 + t) + p * 0.5 * (1.0 - t * t) * _SQRT_2_OVER_PI * (1.0 + p * p * _KAPPA_3))
    return g


@triton.jit
def activation_kernel(z_ptr, y_ptr, n, ACTIVATION: tl.constexpr, BLOCK: tl.constexpr):
    # y = act(z) over n contiguous elements, computed in float32
    offsets = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    z = tl.load(z_ptr + offsets, mask=mask).to(tl.float32)
    tl.store(y_ptr + offsets, activate(z, ACTIVATION).to(y_ptr.dtype.element_ty), mask=mask)


@triton.jit
def activation_grad_kernel(g_ptr, p_ptr, dz_ptr, M, N, stride_gm, stride_gn, stride_pm, stride_pn,
                           ACTIVATION: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    # dz (M×N, contiguous) = g·act'(p) for strided g and p, computed in float32, stored in dz's dtype
    rows = tl.program_id(0).to(tl.int64) * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = tl.program_id(1).to(tl.int64) * BLOCK_N + tl.arange(0, BLOCK_N)
    mask = (rows[:, None] < M) & (cols[None, :] < N)
    g = tl.load(g_ptr + rows[:, None] * stride_gm + cols[None, :] * stride_gn, mask=mask).to(tl.float32)
    p = tl.load(p_ptr + rows[:, None] * stride_pm + cols[None, :] * stride_pn, mask=mask).to(tl.float32)
    dz = activation_grad(g, p, ACTIVATION)
    tl.store(dz_ptr + rows[:, None] * N + cols[None, :], dz.to(dz_ptr.dtype.element_ty), mask=mask)
