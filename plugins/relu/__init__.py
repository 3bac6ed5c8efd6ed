"""relu(x) = max(x, 0), elementwise; NaN stays NaN (torch.relu semantics)."""

from __future__ import annotations

import torch

from kernelzoo import ops
from kernelzoo.elementwise import UnaryOp, derivative_from_output
from kernelzoo.registry import Call


class Relu(UnaryOp):
    """relu(x): max(x, 0) elementwise, NaN propagated as torch.relu does."""

    name = "relu"
    # the derivative: relu_backward from the output (zero where it is)
    derivative = derivative_from_output(lambda grad, y: ops.relu_backward(grad, y))
    # Untuned on the CPU, torch first: a memory-bound pass that torch runs as fast, behind less Python
    # (docs/perf/relu.md, docs/design/elementwise.md). On a GPU the global order stands.
    default_order = {"cpu": ("torch",)}

    def reference(self, call: Call) -> torch.Tensor:
        return torch.relu(call.inputs["x"].double())
