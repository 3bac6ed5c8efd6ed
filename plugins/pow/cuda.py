"""pow in raw CUDA, compiled by NVRTC: the shared unary kernel (plugins/_elementwise/unary.cuh), torch's
special cases, CUDA's powf otherwise."""

from __future__ import annotations

from kernelzoo_plugins._elementwise.cuda import UnaryCuda

from kernelzoo.registry import Call


class PowCuda(UnaryCuda):
    op = "pow"

    def arguments(self, call: Call) -> tuple:
        return (call.params["exponent"],)
