"""sum in OpenMP C: the reduction family's kernels (plugins/_reduce/sum_openmp.c), scale 1."""

from __future__ import annotations

from kernelzoo_plugins._reduce.sum_openmp import SummationOpenMP


class SumOpenMP(SummationOpenMP):
    op = "sum"
