"""mean in Triton: the reduction family's kernels (plugins/_reduce/sum_triton.py) with scale 1/reduced."""

from __future__ import annotations

from kernelzoo_plugins._reduce.sum_triton import SummationTriton


class MeanTriton(SummationTriton):
    op = "mean"
