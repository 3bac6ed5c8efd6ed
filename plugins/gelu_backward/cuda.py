"""gelu_backward in raw CUDA: the shared binary kernels (plugins/_elementwise/binary.cuh), compiled
with both formulas; the call's approximate picks the entry points (its kernel_name)."""

from __future__ import annotations

from kernelzoo_plugins._elementwise.cuda import BinaryCuda


class GeluBackwardCuda(BinaryCuda):
    op = "gelu_backward"
