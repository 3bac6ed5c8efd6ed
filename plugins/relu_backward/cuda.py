"""relu_backward in raw CUDA: the shared binary kernels (plugins/_elementwise/binary.cuh) with
y <= 0 ? 0 : grad."""

from __future__ import annotations

from kernelzoo_plugins._elementwise.cuda import BinaryCuda


class ReluBackwardCuda(BinaryCuda):
    op = "relu_backward"
