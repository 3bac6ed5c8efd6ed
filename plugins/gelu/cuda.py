"""gelu in raw CUDA, compiled by NVRTC: 16-byte accesses, ITEMS of them in flight per thread (the family's
unary wrapper, plugins/_elementwise/cuda.py), a kernel per approximation."""

from __future__ import annotations

from kernelzoo_plugins._elementwise.cuda import UnaryCuda

from kernelzoo.registry import Call


class GeluCuda(UnaryCuda):
    op = "gelu"

    def kernel_base(self, call: Call) -> str:
        return f"gelu_{'tanh' if call.params['approximate'] == 'tanh' else 'erf'}"

    def arguments(self, call: Call) -> tuple:
        return ()
