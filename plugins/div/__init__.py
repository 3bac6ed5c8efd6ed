"""div(a, b) = a / b, true division, elementwise with broadcasting (torch.div semantics).

a and b share one dtype and one device; the output has the broadcast shape and is contiguous,
computed in float32 with IEEE (correctly rounded) division and rounded once to the dtype. As in
torch: x / ±0 = ±inf (the sign of zero counts), 0 / 0 = NaN, and a quotient beyond the dtype's range
is ±inf (1 / 1e-5 in float16), which the reference gets by rounding through the dtype
(kernelzoo.elementwise.overflow_to_inf).
"""

from __future__ import annotations

import torch

from kernelzoo import ops
from kernelzoo.autograd import reduced, scaled
from kernelzoo.elementwise import BinaryOp
from kernelzoo.registry import Derivative


class Div(BinaryOp):
    """div(a, b): a / b with broadcasting, as torch.div (true division)."""

    name = "div"
    # the derivative: grad/b and -grad·a/b² = -(grad/b)·out, each summed back over the dims broadcasting expanded
    derivative = Derivative(
        inputs=("a", "b"),
        save=lambda call, outputs: {"a_shape": call.inputs["a"].shape, "b": call.inputs["b"], "y": outputs[0]},
        backward=lambda saved, grad: _div_grads(grad, saved),
    )
    # Untuned on the CPU, torch first: a memory-bound pass that torch runs as fast, behind less Python
    # (docs/perf/div.md, docs/design/elementwise.md). On a GPU the global order stands.
    default_order = {"cpu": ("torch",)}

    def formula(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return a / b


def _div_grads(grad: torch.Tensor, saved: dict) -> dict[str, torch.Tensor]:
    grad_over_b = ops.div(grad, saved["b"])
    return {"a": reduced(grad_over_b, saved["a_shape"]),
            "b": reduced(scaled(ops.mul(grad_over_b, saved["y"]), -1.0), saved["b"].shape)}
