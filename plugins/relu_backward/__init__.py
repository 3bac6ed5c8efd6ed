"""relu_backward(grad, y): relu's gradient, grad where y > 0 and 0 elsewhere, elementwise with
broadcasting (in practice grad and y share a shape).

y is relu's output, so the test data's y has relu's exact zeros. Semantics of torch's
threshold_backward(grad, y, 0): 0 where y <= 0, grad otherwise, so a NaN y passes grad through and a
NaN grad is kept only where y > 0 (or y is NaN). grad and y share one dtype and one device; the
output has the broadcast shape and is contiguous.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from kernelzoo.elementwise import BinaryOp
from kernelzoo.registry import Call, randn


class ReluBackward(BinaryOp):
    """relu_backward(grad, y): grad where y > 0 else 0 (y = relu's output), as torch's
    threshold_backward(grad, y, 0)."""

    name = "relu_backward"
    # Untuned on the CPU, torch first: a memory-bound pass that torch runs as fast, behind less Python
    # (docs/perf/relu_backward.md, docs/design/elementwise.md). On a GPU the global order stands.
    default_order = {"cpu": ("torch",)}
    operands = ("grad", "y")

    def check(self, grad: torch.Tensor, y: torch.Tensor) -> Call:
        return self.binary_call(grad, y)

    def formula(self, grad: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return torch.where(y <= 0, 0.0, grad)

    def make_input(self, name: str, shape: Sequence[int], device: torch.device | str, dtype: torch.dtype,
                   generator: torch.Generator | None) -> torch.Tensor:
        x = randn(shape, device, dtype, generator)
        return x.relu() if name == "y" else x  # relu's output: half of it exact zeros
