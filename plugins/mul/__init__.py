"""mul(a, b) = a·b, elementwise with broadcasting (torch.mul semantics).

a and b share one dtype and one device; the output has the broadcast shape and is contiguous, computed
in float32 and rounded once (kernelzoo.elementwise.BinaryOp: checks, shapes, conformance cases). inf·0
is NaN, as in IEEE arithmetic and torch.

mul's cuda.py and openmp.py also hold the wrapper bases of every binary op's cuda and openmp plugins
(div, relu_backward, gelu_backward): the kernels are shared (plugins/_elementwise/), each op's source
only names its expression.
"""

from __future__ import annotations

import torch

from kernelzoo import ops
from kernelzoo.autograd import reduced
from kernelzoo.elementwise import BinaryOp
from kernelzoo.registry import Derivative


class Mul(BinaryOp):
    """mul(a, b): a·b with broadcasting, as torch.mul."""

    name = "mul"
    # the derivative: grad·b and grad·a, each summed back over the dims broadcasting expanded
    derivative = Derivative(
        inputs=("a", "b"),
        save=lambda call, outputs: {"a": call.inputs["a"], "b": call.inputs["b"]},
        backward=lambda saved, grad: {"a": reduced(ops.mul(grad, saved["b"]), saved["a"].shape),
                                      "b": reduced(ops.mul(grad, saved["a"]), saved["b"].shape)},
    )
    # Untuned on the CPU, torch first: a memory-bound pass that torch runs as fast, behind less Python
    # (docs/perf/mul.md, docs/design/elementwise.md). On a GPU the global order stands.
    default_order = {"cpu": ("torch",)}

    def formula(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return a * b
