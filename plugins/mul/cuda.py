"""mul in raw CUDA, compiled by NVRTC: binary.cuh's kernels with a·b (the family's wrapper,
plugins/_elementwise/cuda.py)."""

from __future__ import annotations

from kernelzoo_plugins._elementwise.cuda import BinaryCuda


class MulCuda(BinaryCuda):
    op = "mul"
