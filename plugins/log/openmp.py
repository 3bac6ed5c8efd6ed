"""log in OpenMP C: the shared unary loop (plugins/_elementwise/unary_openmp.h) with glibc's logf."""

from __future__ import annotations

from kernelzoo_plugins._elementwise.openmp import UnaryOpenMP


class LogOpenMP(UnaryOpenMP):
    op = "log"
