"""mul in Triton: the shared elementwise kernels (kernelzoo.backends.triton_elementwise) with OP="mul"."""

from __future__ import annotations

from kernelzoo.backends.triton_elementwise import BinaryTriton


class MulTriton(BinaryTriton):
    op = "mul"
