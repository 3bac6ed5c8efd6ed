"""mean in Triton: sum's kernels (plugins/sum/triton.py) with scale 1/reduced."""

from __future__ import annotations

from pathlib import Path

from kernelzoo_plugins.sum.triton import SumTriton


class MeanTriton(SumTriton):
    op = "mean"
    sources = ("triton.py",)  # sum's module: its text is part of the tuning key

    def source_dir(self) -> Path:
        return Path(__file__).parent.parent / "sum"
