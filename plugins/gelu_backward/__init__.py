"""gelu_backward(grad, x, approximate="none"): grad · d gelu(x)/dx, elementwise with broadcasting (in
practice grad and x share a shape), with torch.ops.aten.gelu_backward's semantics. gelu's forward
(plugins/gelu) defines the two formulas and their constants; their derivatives, as torch writes them:

    approximate="none":  cdf + x·pdf,  cdf = (1 + erf(x/√2)) / 2,  pdf = exp(-x²/2) / √(2π)
    approximate="tanh":  (1 + t)/2 + x/2 · (1 - t²) · √(2/π)·(1 + 3·0.044715·x²),
                         t = tanh(√(2/π)·(x + 0.044715·x³))

Infinities follow the formulas, not the limits: x = ±inf gives NaN (inf·0) in both, as in torch.
The compiled plugins and Triton write the tanh derivative without tanh: with e = exp(-2|u|) and
r = 1/(1 + e), (1 + t)/2 is r (u >= 0) or e·r (u < 0) and 1 - t² = 4·e·r², which stays accurate
where t rounds to ±1 (1 - t² in float32 loses all its digits there) and costs one exp.
"""

from __future__ import annotations

import math
from typing import Any

import torch
from kernelzoo_plugins._elementwise.spec import APPROXIMATIONS, KAPPA, SQRT_2_OVER_PI, SQRT_HALF

from kernelzoo.elementwise import BinaryOp
from kernelzoo.errors import ArgumentError
from kernelzoo.registry import BadCase, Call

INV_SQRT_2PI = 1.0 / math.sqrt(2.0 * math.pi)  # the normal density's factor
# Counting each transcendental as one operation, the product with grad included. none: x/√2, erf,
# 1+, /2, x·x, ·(-1/2), exp, /√(2π), x·pdf, +, ·grad. tanh: x·x, ·x, ·κ, +x, ·√(2/π), tanh (or exp and
# a division), the derivative's 1 + 3κx² (3), ·√(2/π), 1 - t² (2), two halves, two products, +, ·grad.
FLOPS_PER_ELEMENT = {"none": 11.0, "tanh": 19.0}


class GeluBackward(BinaryOp):
    """gelu_backward(grad, x, approximate="none"|"tanh"): grad times gelu's derivative at x, as
    torch.ops.aten.gelu_backward."""

    name = "gelu_backward"
    operands = ("grad", "x")
    variants = ({"approximate": "none"}, {"approximate": "tanh"})

    def check(self, grad: torch.Tensor, x: torch.Tensor, approximate: str = "none") -> Call:
        return self.binary_call(grad, x, approximate=approximate)

    def params(self, approximate: Any = "none", **kwargs: Any) -> dict[str, Any]:
        if kwargs:
            raise ArgumentError(f"gelu_backward: unexpected argument(s) {', '.join(kwargs)}")
        if not isinstance(approximate, str) or approximate not in APPROXIMATIONS:
            raise ArgumentError(f"gelu_backward: approximate must be 'none' or 'tanh', got {approximate!r}")
        return {"approximate": approximate}

    def kernel_name(self, call: Call) -> str:
        return f"gelu_backward_{call.params['approximate']}"

    def flops(self, call: Call) -> float:
        return FLOPS_PER_ELEMENT[call.params["approximate"]] * self.sizes(call)["n"]

    def formula(self, grad: torch.Tensor, x: torch.Tensor, approximate: str) -> torch.Tensor:
        # torch's formulas written out, so the infinities are those above whatever torch's version does
        if approximate == "tanh":
            t = torch.tanh(SQRT_2_OVER_PI * (x + KAPPA * x * x * x))
            inner_derivative = SQRT_2_OVER_PI * (1.0 + 3.0 * KAPPA * x * x)
            return grad * (0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * inner_derivative)
        cdf = 0.5 * (1.0 + torch.erf(x * SQRT_HALF))
        pdf = torch.exp(-0.5 * x * x) * INV_SQRT_2PI
        return grad * (cdf + x * pdf)

    def bad_cases(self) -> list[BadCase]:
        return [
            *super().bad_cases(),
            BadCase("bad-approximate", lambda: ((torch.ones(3), torch.ones(3)), {"approximate": "erf"}),
                    ArgumentError, "gelu_backward: approximate must be 'none' or 'tanh', got 'erf'"),
            BadCase("approximate-not-str", lambda: ((torch.ones(3), torch.ones(3)), {"approximate": True}),
                    ArgumentError, "gelu_backward: approximate must be 'none' or 'tanh', got True"),
        ]
