"""pow(x, exponent) = x ** exponent, elementwise, for a finite real exponent, with the semantics of
torch.pow(tensor, float) (its float32 and float64 kernels, on the CPU and the GPU):

    exponent 0      1 everywhere, NaN included
    exponent 0.5    sqrt(x): NaN at -inf and -0 at -0, where C's pow gives inf and +0
    exponent -0.5   1 / sqrt(x): NaN at -inf and -inf at -0 (C's pow: 0 and inf)
    exponent -1     1 / x
    otherwise       C's pow (torch computes 2, 3 and -2 as x·x, x·x·x and 1 / (x·x), which agree
                    with it): a finite negative base gives NaN unless the exponent is an integer,
                    and then the result has x's sign for odd integers; pow(±0, e < 0) = inf (-inf
                    for -0 and odd e); pow(-inf, e) is ±inf for e > 0 and ±0 for e < 0, the sign
                    x's for odd integers and + otherwise.

Every plugin computes in float32, the exponent included (rounded to it, as torch does for a float32
x), so the reference takes that exponent too; one that is not finite in float32 (inf, NaN, 1e40) is
refused. Results beyond the output dtype's range are ±inf (pow(1e-5, -1) in float16), as in any
kernel that rounds to it.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Sequence
from typing import Any

import torch
from kernelzoo_plugins._elementwise.spec import interpreter_sized

from kernelzoo import ops
from kernelzoo.autograd import scaled
from kernelzoo.elementwise import UnaryOp, overflow_to_inf
from kernelzoo.errors import ArgumentError, DTypeError
from kernelzoo.registry import BadCase, Call, Case, Derivative


def _float32(value: float) -> float:
    """``value`` rounded to float32 (inf beyond its range)."""
    return torch.tensor(float(value), dtype=torch.float32).item()


class Pow(UnaryOp):
    """pow(x, exponent): x ** exponent elementwise for a finite real exponent, as torch.pow."""

    name = "pow"
    # the derivative: exponent·x^(exponent-1) (0 for exponent 0, as torch gives even at x = 0)
    derivative = Derivative(
        inputs=("x",),
        save=lambda call, outputs: {"x": call.inputs["x"], "exponent": call.params["exponent"]},
        backward=lambda saved, grad: {"x": _pow_grad(grad, saved["x"], saved["exponent"])},
    )
    # the kernels' special cases (2: x·x, 0.5: sqrt, -1: 1/x, 3: x·x·x) and their general path (1.5: NaN for x < 0)
    variants = ({"exponent": 2.0}, {"exponent": 0.5}, {"exponent": -1.0}, {"exponent": 3.0},
                {"exponent": 1.5})

    def check(self, x: torch.Tensor, exponent: float) -> Call:
        return super().check(x, exponent=exponent)

    def params(self, exponent: Any = None, **kwargs: Any) -> dict[str, Any]:
        if kwargs:
            raise ArgumentError(f"pow: unexpected argument(s) {', '.join(kwargs)}")
        real = isinstance(exponent, numbers.Real) and not isinstance(exponent, bool)
        if not real or not math.isfinite(_float32(exponent)):
            raise ArgumentError(f"pow: exponent must be a real number, finite in float32, got {exponent!r}")
        return {"exponent": float(exponent)}

    def example(self, shape: Sequence[int], dtype: torch.dtype, device: torch.device | str,
                generator: torch.Generator | None = None, **kwargs: Any) -> Call:
        """Random x of ``shape``; the exponent of the first variant unless given."""
        return super().example(shape, dtype, device, generator, **{**self.variants[0], **kwargs})

    def reference(self, call: Call) -> torch.Tensor:
        exponent = _float32(call.params["exponent"])
        return overflow_to_inf(torch.pow(call.inputs["x"].double(), exponent), call.dtype)

    def cases(self) -> list[Case]:
        return interpreter_sized(super().cases())

    def bad_cases(self) -> list[BadCase]:
        return [
            BadCase("int-dtype", lambda: ((torch.arange(4), 2.0), {}), DTypeError,
                    "pow: x must be float32, float16, bfloat16, got torch.int64"),
            BadCase("not-a-tensor", lambda: (([1.0, 2.0], 2.0), {}), ArgumentError,
                    "pow: x must be a torch.Tensor, got list"),
            BadCase("exponent-str", lambda: ((torch.ones(3), "2"), {}), ArgumentError,
                    "pow: exponent must be a real number, finite in float32, got '2'"),
            BadCase("exponent-bool", lambda: ((torch.ones(3), True), {}), ArgumentError,
                    "pow: exponent must be a real number, finite in float32, got True"),
            BadCase("exponent-inf", lambda: ((torch.ones(3), math.inf), {}), ArgumentError,
                    "pow: exponent must be a real number, finite in float32, got inf"),
            BadCase("exponent-past-float32", lambda: ((torch.ones(3), 1e40), {}), ArgumentError,
                    "pow: exponent must be a real number, finite in float32, got 1e+40"),
            BadCase("exponent-tensor", lambda: ((torch.ones(3), torch.ones(3)), {}), ArgumentError,
                    "pow: exponent must be a real number, finite in float32, got tensor"),
        ]


def _pow_grad(grad: torch.Tensor, x: torch.Tensor, exponent: float) -> torch.Tensor:
    """grad·exponent·x^(exponent-1), by the mul and pow ops (zeros for exponent 0, as torch gives)."""
    if exponent == 0.0:
        return torch.zeros(grad.shape, dtype=grad.dtype, device=grad.device)
    if exponent == 1.0:
        return grad
    if exponent == 2.0:
        return ops.mul(grad, scaled(x, 2.0))
    return ops.mul(grad, scaled(ops.pow(x, exponent - 1.0), exponent))
