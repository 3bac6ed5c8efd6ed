"""relu_backward in Triton: the shared elementwise kernels (kernelzoo.backends.triton_elementwise) with
OP="relu_backward"."""

from __future__ import annotations

from kernelzoo.backends.triton_elementwise import BinaryTriton


class ReluBackwardTriton(BinaryTriton):
    op = "relu_backward"
