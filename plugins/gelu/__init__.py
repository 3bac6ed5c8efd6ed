"""gelu(x, approximate="none"), elementwise, with torch.nn.functional.gelu's semantics.

    approximate="none":  0.5·x·(1 + erf(x/√2))
    approximate="tanh":  0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³)))

Infinities follow torch's formula, not the limit: gelu(+inf) = inf, gelu(-inf) = -inf·0 = NaN
(torch on the GPU and in float64; torch's vectorised float32/bfloat16 CPU kernel also gives NaN
for +inf, pytorch/pytorch#185770, which the torch plugin corrects).
"""

from __future__ import annotations

from typing import Any

import torch
from kernelzoo_plugins._elementwise.spec import APPROXIMATIONS, KAPPA, SQRT_2_OVER_PI, SQRT_HALF

from kernelzoo import ops
from kernelzoo.elementwise import UnaryOp
from kernelzoo.errors import ArgumentError
from kernelzoo.registry import BadCase, Call, Derivative

# Counting each transcendental as one operation. none: x·(1/√2), erf, 1+, 0.5·x, product.
# tanh: x·x·x (2), 0.044715·x³, x+, ·√(2/π), tanh, 1+, 0.5·x, product.
FLOPS_PER_ELEMENT = {"none": 5.0, "tanh": 9.0}


class Gelu(UnaryOp):
    """gelu(x, approximate="none"|"tanh"): torch.nn.functional.gelu, elementwise."""

    name = "gelu"
    # the derivative: gelu_backward from x, by the same formula as the forward
    derivative = Derivative(
        inputs=("x",),
        save=lambda call, outputs: {"x": call.inputs["x"], "approximate": call.params["approximate"]},
        backward=lambda saved, grad: {"x": ops.gelu_backward(grad, saved["x"], approximate=saved["approximate"])},
    )
    flops_per_element = FLOPS_PER_ELEMENT["none"]  # the default variant; flops() reads the call's
    variants = ({"approximate": "none"}, {"approximate": "tanh"})

    def check(self, x: torch.Tensor, approximate: str = "none") -> Call:
        return super().check(x, approximate=approximate)

    def params(self, approximate: Any = "none", **kwargs: Any) -> dict[str, Any]:
        if kwargs:
            raise ArgumentError(f"gelu: unexpected argument(s) {', '.join(kwargs)}")
        if not isinstance(approximate, str) or approximate not in APPROXIMATIONS:
            raise ArgumentError(f"gelu: approximate must be 'none' or 'tanh', got {approximate!r}")
        return {"approximate": approximate}

    def flops(self, call: Call) -> float:
        return FLOPS_PER_ELEMENT[call.params["approximate"]] * call.inputs["x"].numel()

    def reference(self, call: Call) -> torch.Tensor:
        # torch's formula written out, so the infinities stay those above whatever torch's
        # version does about pytorch/pytorch#185770
        x = call.inputs["x"].double()
        if call.params["approximate"] == "tanh":
            return 0.5 * x * (1.0 + torch.tanh(SQRT_2_OVER_PI * (x + KAPPA * x * x * x)))
        return 0.5 * x * (1.0 + torch.erf(x * SQRT_HALF))

    def bad_cases(self) -> list[BadCase]:
        return [
            *super().bad_cases(),
            BadCase("bad-approximate", lambda: ((torch.ones(3),), {"approximate": "erf"}), ArgumentError,
                    "gelu: approximate must be 'none' or 'tanh', got 'erf'"),
            BadCase("approximate-not-str", lambda: ((torch.ones(3),), {"approximate": True}), ArgumentError,
                    "gelu: approximate must be 'none' or 'tanh', got True"),
        ]
