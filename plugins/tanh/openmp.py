"""tanh in OpenMP C: the shared unary loop (plugins/_elementwise/unary_openmp.h) with glibc's tanhf."""

from __future__ import annotations

from kernelzoo_plugins._elementwise.openmp import UnaryOpenMP


class TanhOpenMP(UnaryOpenMP):
    op = "tanh"
