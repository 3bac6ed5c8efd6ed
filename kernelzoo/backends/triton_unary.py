"""The Triton kernel of the unary elementwise ops (exp, log, tanh, pow), the base of their plugins, and
:class:`ElementwiseTriton`, the wrapper those and the other ops of one tensor x (relu, gelu, dropout) share.

One ``@triton.jit`` kernel takes the op as a ``tl.constexpr`` string, so each op compiles to its own
kernel from this one source; the op's plugin module only names its op (and pow its exponent).

Only tl functions that both Triton 3.6 and the interpreter have are used (tl.exp, tl.exp2, tl.log,
tl.log2, tl.sqrt_rn, tl.fma, tl.floor, tl.abs). tanh and pow exist only in libdevice
(``tl.extra.cuda.libdevice``), whose calls the interpreter refuses ("extern_elementwise not supported
in interpreter mode"), so both are written here from those.

Precision on the GPU: Triton lowers a float32 tl.exp to ex2.approx(x·log2 e); rounding that product
costs a relative |x|·2⁻²⁴ (6e-8·|x|), past the float32 tolerance (1.3e-6) for |x| > 20. exp puts the
product's rounding error, found exactly by an fma, back as a first-order factor; pow forms
exponent·log2|x| in float64 and does the same with what rounding it to float32 loses. What remains
is ex2.approx's own error, about 2 ulp.
"""

from __future__ import annotations

import math
from typing import Any, ClassVar

import torch
import triton
import triton.language as tl

from kernelzoo.backends.triton import TritonImplementation, cdiv, launcher
from kernelzoo.registry import Call

# log2(e) as a float32 (exact in it) and the rest of it; ln 2 for the first-order correction
_LOG2E_HI = tl.constexpr(1.44269502162933349609375)
_LOG2E_LO = tl.constexpr(math.log2(math.e) - 1.44269502162933349609375)
_LN2 = tl.constexpr(math.log(2.0))
# Cephes' tanhf polynomial for |x| < 0.625: tanh(x) = x + x·z·P(z), z = x² (8e-8 relative at most in float32)
_TANH_P4 = tl.constexpr(-5.70498872745e-3)
_TANH_P3 = tl.constexpr(2.06390887954e-2)
_TANH_P2 = tl.constexpr(-5.37397155531e-2)
_TANH_P1 = tl.constexpr(1.33314422036e-1)
_TANH_P0 = tl.constexpr(-3.33332819422e-1)
# (constants go right of a tensor: constexpr * tensor is no tensor in the interpreter)


@triton.jit
def _exp2_corrected(t, d):
    """2^(t + d) for a small d (the rounding error of t): 2^t·(1 + d·ln 2) to first order."""
    d = tl.where(tl.abs(t) < 256.0, d, 0.0)  # t = ±inf gives d = inf - inf; past ±150, 2^t is inf or 0 anyway
    return tl.exp2(t) * (1.0 + d * _LN2)


@triton.jit
def _exp(x):
    # x·log2(e) = t + (what the fma finds t misses of x·LOG2E_HI) + x·LOG2E_LO (below 2e-8·|x|)
    t = x * _LOG2E_HI
    return _exp2_corrected(t, tl.fma(x, tl.zeros_like(x) + _LOG2E_HI, -t) + x * _LOG2E_LO)


@triton.jit
def _tanh(x):
    ax = tl.abs(x)
    t = tl.exp(ax * -2.0)  # in (0, 1]: no overflow; NaN stays NaN
    far = (1.0 - t) / (1.0 + t)  # 1 - t cancels for small |x|: the polynomial takes those
    z = x * x
    near = x + x * z * ((((z * _TANH_P4 + _TANH_P3) * z + _TANH_P2) * z + _TANH_P1) * z + _TANH_P0)
    return tl.where(ax < 0.625, near, tl.where(x < 0.0, -far, far))


@triton.jit
def _pow(x, a):
    # torch's special cases first (see plugins/pow): they differ from C's pow at -inf and -0
    if a == 0.0:
        y = tl.zeros_like(x) + 1.0  # 1 for NaN too
    elif a == 1.0:
        y = x
    elif a == 2.0:
        y = x * x
    elif a == 3.0:
        y = x * x * x
    elif a == 0.5:
        y = tl.sqrt_rn(x)
    elif a == -0.5:
        y = 1.0 / tl.sqrt_rn(x)
    elif a == -1.0:
        y = 1.0 / x
    elif a == -2.0:
        y = 1.0 / (x * x)
    else:  # C's pow: |x|^a = 2^(a·log2|x|), then the sign
        ab = tl.zeros_like(x) + a  # a block: the interpreter cannot mix scalar and block booleans
        # a·log2|x| in float64: it reaches the hundreds, where float32's rounding of log2 alone is 1e-5 relative
        t64 = tl.log2(tl.abs(x).to(tl.float64)) * ab.to(tl.float64)
        t = t64.to(tl.float32)
        r = _exp2_corrected(t, (t64 - t.to(tl.float64)).to(tl.float32))
        integer = tl.floor(ab) == ab
        odd = integer & (tl.floor(ab * 0.5) * 2.0 != ab)
        negative = x.to(tl.int32, bitcast=True) < 0  # the sign bit: pow(-0, -3) = -inf
        y = tl.where(negative & odd, -r, r)
        # a finite negative base to a non-integer power; pow(-inf, 1.5) = inf, pow(-0, 1.5) = 0
        y = tl.where((x < 0.0) & (x > -float("inf")) & (~integer), float("nan"), y)
    return y


@triton.jit
def unary_kernel(x_ptr, y_ptr, n, a, OP: tl.constexpr, BLOCK: tl.constexpr):
    """y = OP(x, a) over BLOCK elements per program; a is pow's exponent (ignored by the others)."""
    offsets = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    x = tl.load(x_ptr + offsets, mask=mask).to(tl.float32)
    if OP == "exp":
        y = _exp(x)
    elif OP == "log":
        y = tl.log(x)
    elif OP == "tanh":
        y = _tanh(x)
    else:
        y = _pow(x, a)
    tl.store(y_ptr + offsets, y.to(y_ptr.dtype.element_ty), mask=mask)


class ElementwiseTriton(TritonImplementation):
    """Base of the triton plugins of an elementwise op of one tensor x: one program per BLOCK elements of x (made
    contiguous) into y of its shape. A subclass sets ``kernel``, a ``@triton.jit`` kernel of
    (x_ptr, y_ptr, n, *arguments, BLOCK), and :meth:`arguments` where it takes more than those."""

    config_space: ClassVar = {"BLOCK": [512, 1024, 2048, 4096, 8192], "num_warps": [2, 4, 8, 16]}
    default_config: ClassVar = {"BLOCK": 2048, "num_warps": 8}
    kernel: ClassVar[Any]

    def arguments(self, call: Call) -> tuple[tuple, dict[str, Any]]:
        """The kernel's arguments after (x_ptr, y_ptr, n), and its tl.constexpr keywords other than BLOCK."""
        return (), {}

    def run(self, call: Call, config: dict) -> torch.Tensor:
        x = call.inputs["x"].contiguous()
        y = call.empty(x.shape)
        n = x.numel()
        if n:
            args, constants = self.arguments(call)
            grid = (cdiv(n, config["BLOCK"]),)
            launcher(self.kernel)[grid](x, y, n, *args, **constants, BLOCK=config["BLOCK"],
                                        num_warps=config["num_warps"])
        return y


class UnaryTriton(ElementwiseTriton):
    """Base of the unary ops' triton plugins: a subclass sets ``op`` (the kernel's OP)."""

    kernel = unary_kernel

    def scalar(self, call: Call) -> float:
        """The kernel's float argument ``a``: pow's exponent, 0 for the others."""
        return 0.0

    def arguments(self, call: Call) -> tuple[tuple, dict[str, Any]]:
        return (self.scalar(call),), {"OP": self.op}
