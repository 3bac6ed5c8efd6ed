"""pow in OpenMP C: the shared unary loop (plugins/_elementwise/unary_openmp.h), torch's special cases,
glibc's powf otherwise."""

from __future__ import annotations

from kernelzoo_plugins._elementwise.openmp import UnaryOpenMP

from kernelzoo.registry import Call


class PowOpenMP(UnaryOpenMP):
    op = "pow"

    def arguments(self, call: Call) -> tuple:
        return (call.params["exponent"],)
