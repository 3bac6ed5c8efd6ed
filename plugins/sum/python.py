"""The spec in tensor ops: the reduction family's (plugins/_reduce/sum_python.py), scale 1."""

from __future__ import annotations

from kernelzoo_plugins._reduce.sum_python import SummationPython


class SumPython(SummationPython):
    op = "sum"
