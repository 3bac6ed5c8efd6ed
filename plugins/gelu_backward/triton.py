"""gelu_backward in Triton: the shared elementwise kernels (kernelzoo.backends.triton_elementwise) with
OP="gelu_backward_none" (tl.math.erf, tl.exp) or "gelu_backward_tanh" (the tanh derivative through one
exp, as this op's spec describes)."""

from __future__ import annotations

from kernelzoo.backends.triton_elementwise import BinaryTriton


class GeluBackwardTriton(BinaryTriton):
    op = "gelu_backward"
