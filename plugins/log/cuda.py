"""log in raw CUDA, compiled by NVRTC: the shared unary kernel (plugins/_elementwise/unary.cuh) with logf."""

from __future__ import annotations

from kernelzoo_plugins._elementwise.cuda import UnaryCuda


class LogCuda(UnaryCuda):
    op = "log"
