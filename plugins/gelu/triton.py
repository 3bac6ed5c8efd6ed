"""gelu in Triton: one program per BLOCK elements, computed in float32.

erf is tl.math.erf (libdevice's erff on the GPU, math.erf in the interpreter). There is no
tanh in tl.math of both Triton 3.6 and the interpreter, and none is needed:
0.5·x·(1 + tanh(u)) = x·σ(2u) = x / (1 + exp(-2u)), which keeps its relative precision for
u ≪ 0, where 1 + tanh(u) cancels, and gives torch's infinities: x = +inf: inf / (1 + 0) = inf;
x = -inf: -inf / (1 + inf) = NaN; x ≪ 0 finite: x / inf = -0. On the GPU tl.exp is
ex2.approx(-2u·log2 e), off by a relative 2|u|·log2(e)·2⁻²⁴ from rounding its argument: under
2e-6 for |u| < 10; beyond, either exp(-2u) is negligible against 1 or |gelu| < 1e-5 (the
absolute tolerance).
"""

from __future__ import annotations

import math
from typing import Any

import triton
import triton.language as tl

from kernelzoo.backends.triton_unary import ElementwiseTriton
from kernelzoo.registry import Call

_SQRT_HALF = tl.constexpr(math.sqrt(0.5))
_MINUS_2_SQRT_2_OVER_PI = tl.constexpr(-2.0 * math.sqrt(2.0 / math.pi))
_KAPPA = tl.constexpr(0.044715)
# (constants go right of a tensor: constexpr * tensor is no tensor in the interpreter)


@triton.jit
def _gelu_kernel(x_ptr, y_ptr, n, TANH: tl.constexpr, BLOCK: tl.constexpr):
    offsets = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    x = tl.load(x_ptr + offsets, mask=mask).to(tl.float32)
    if TANH:
        y = x / (1.0 + tl.exp((x + x * x * x * _KAPPA) * _MINUS_2_SQRT_2_OVER_PI))
    else:
        y = 0.5 * x * (1.0 + tl.math.erf(x * _SQRT_HALF))
    tl.store(y_ptr + offsets, y.to(y_ptr.dtype.element_ty), mask=mask)


class GeluTriton(ElementwiseTriton):
    op = "gelu"
    kernel = _gelu_kernel

    def arguments(self, call: Call) -> tuple[tuple, dict[str, Any]]:
        return (), {"TANH": call.params["approximate"] == "tanh"}
