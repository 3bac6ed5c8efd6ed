"""log in Triton: the shared unary kernel (kernelzoo/backends/triton_unary.py) with tl.log."""

from __future__ import annotations

from kernelzoo.backends.triton_unary import UnaryTriton


class LogTriton(UnaryTriton):
    op = "log"
