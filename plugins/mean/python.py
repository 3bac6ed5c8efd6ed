"""The spec in tensor ops: sum's python plugin, scaled by 1/reduced."""

from __future__ import annotations

from pathlib import Path

from kernelzoo_plugins.sum.python import SumPython


class MeanPython(SumPython):
    op = "mean"
    sources = ("python.py",)  # sum's module: its text is part of the tuning key

    def source_dir(self) -> Path:
        return Path(__file__).parent.parent / "sum"
