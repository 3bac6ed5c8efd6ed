"""exp in OpenMP C: the shared unary loop (plugins/_elementwise/unary_openmp.h) with vector_math.h's exp."""

from __future__ import annotations

from kernelzoo_plugins._elementwise.openmp import UnaryOpenMP


class ExpOpenMP(UnaryOpenMP):
    op = "exp"
