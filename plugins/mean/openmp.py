"""mean in OpenMP C: the reduction family's kernels (plugins/_reduce/sum_openmp.c) with scale 1/reduced."""

from __future__ import annotations

from kernelzoo_plugins._reduce.sum_openmp import SummationOpenMP


class MeanOpenMP(SummationOpenMP):
    op = "mean"
