"""div in raw CUDA: the shared binary kernels (plugins/_elementwise/binary.cuh) with a / b."""

from __future__ import annotations

from kernelzoo_plugins._elementwise.cuda import BinaryCuda


class DivCuda(BinaryCuda):
    op = "div"
