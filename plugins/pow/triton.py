"""pow in Triton: the shared unary kernel (kernelzoo/backends/triton_unary.py): torch's special cases,
otherwise 2^(exponent·log2|x|) with the sign and NaN rules of C's pow."""

from __future__ import annotations

from kernelzoo.backends.triton_unary import UnaryTriton
from kernelzoo.registry import Call


class PowTriton(UnaryTriton):
    op = "pow"

    def scalar(self, call: Call) -> float:
        return call.params["exponent"]
