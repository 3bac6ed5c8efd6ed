"""exp(x) = eˣ, elementwise, with torch.exp's semantics: exp(-inf) = 0, exp(inf) = inf, NaN stays NaN.

Its reference rounds to ±inf what leaves the dtype's range (kernelzoo.elementwise.overflow_to_inf), and its cases
keep the largest out of Triton's interpreter (plugins/_elementwise/spec.py).
"""

from __future__ import annotations

import torch
from kernelzoo_plugins._elementwise.spec import interpreter_sized

from kernelzoo import ops
from kernelzoo.elementwise import UnaryOp, derivative_from_output, overflow_to_inf
from kernelzoo.registry import Call, Case


class Exp(UnaryOp):
    """exp(x): eˣ elementwise, as torch.exp."""

    name = "exp"
    # the derivative: exp(x) itself, the output, times the gradient
    derivative = derivative_from_output(lambda grad, y: ops.mul(grad, y))
    # Untuned on the CPU, torch first: as fast per element where the data is large, behind more Python per call
    # (docs/perf/exp.md, docs/design/elementwise.md). On a GPU the global order stands.
    default_order = {"cpu": ("torch",)}

    def cases(self) -> list[Case]:
        return interpreter_sized(super().cases())

    def reference(self, call: Call) -> torch.Tensor:
        return overflow_to_inf(torch.exp(call.inputs["x"].double()), call.dtype)
