"""exp in raw CUDA, compiled by NVRTC: the shared unary kernel (plugins/_elementwise/unary.cuh) with expf."""

from __future__ import annotations

from kernelzoo_plugins._elementwise.cuda import UnaryCuda


class ExpCuda(UnaryCuda):
    op = "exp"
