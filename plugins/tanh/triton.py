"""tanh in Triton: the shared unary kernel (kernelzoo/backends/triton_unary.py): Cephes' polynomial
below |x| = 0.625, (1 - e^-2|x|) / (1 + e^-2|x|) with the sign of x above."""

from __future__ import annotations

from kernelzoo.backends.triton_unary import UnaryTriton


class TanhTriton(UnaryTriton):
    op = "tanh"
