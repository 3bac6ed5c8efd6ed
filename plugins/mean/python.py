"""The spec in tensor ops: the reduction family's (plugins/_reduce/sum_python.py), scaled by 1/reduced."""

from __future__ import annotations

from kernelzoo_plugins._reduce.sum_python import SummationPython


class MeanPython(SummationPython):
    op = "mean"
