"""div in Triton: the shared elementwise kernels (kernelzoo.backends.triton_elementwise) with OP="div",
which divides with tl.div_rn (IEEE, correctly rounded)."""

from __future__ import annotations

from kernelzoo.backends.triton_elementwise import BinaryTriton


class DivTriton(BinaryTriton):
    op = "div"
