"""exp in Triton: the shared unary kernel (kernelzoo/backends/triton_unary.py), tl.exp2 with the
rounding of x·log2(e) corrected."""

from __future__ import annotations

from kernelzoo.backends.triton_unary import UnaryTriton


class ExpTriton(UnaryTriton):
    op = "exp"
