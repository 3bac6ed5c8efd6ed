"""tanh(x), elementwise, with torch.tanh's semantics: tanh(±inf) = ±1, NaN stays NaN."""

from __future__ import annotations

import torch
from kernelzoo_plugins._elementwise.spec import interpreter_sized

from kernelzoo import ops
from kernelzoo.elementwise import UnaryOp, derivative_from_output
from kernelzoo.registry import Call, Case


class Tanh(UnaryOp):
    """tanh(x) elementwise, as torch.tanh."""

    name = "tanh"
    # the derivative: 1 - tanh(x)², from the output
    derivative = derivative_from_output(lambda grad, y: ops.mul(grad, _one_minus_square(y)))
    # Untuned on the CPU, torch first: kz_tanhf16 computes both of its formulas and an exp per element, torch's
    # vectorised tanh less (docs/perf/tanh.md, docs/design/elementwise.md). On a GPU the global order stands.
    default_order = {"cpu": ("torch",)}

    def cases(self) -> list[Case]:
        return interpreter_sized(super().cases())

    def reference(self, call: Call) -> torch.Tensor:
        return torch.tanh(call.inputs["x"].double())


def _one_minus_square(y: torch.Tensor) -> torch.Tensor:
    """1 - y², by the add and mul ops."""
    return ops.add(torch.full((), 1.0, dtype=y.dtype, device=y.device), ops.mul(y, y), alpha=-1.0)
