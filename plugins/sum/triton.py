"""sum in Triton: the reduction family's kernels (plugins/_reduce/sum_triton.py), scale 1."""

from __future__ import annotations

from kernelzoo_plugins._reduce.sum_triton import SummationTriton


class SumTriton(SummationTriton):
    op = "sum"
