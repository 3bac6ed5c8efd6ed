"""mean in OpenMP C: sum's kernels (plugins/sum/openmp.c) with scale 1/reduced."""

from __future__ import annotations

from pathlib import Path

from kernelzoo_plugins.sum.openmp import SumOpenMP


class MeanOpenMP(SumOpenMP):
    op = "mean"
    sources = ("openmp.c", "openmp.py")  # sum's kernel and wrapper: both are part of the tuning key

    def source_dir(self) -> Path:
        return Path(__file__).parent.parent / "sum"
