"""exp in raw CUDA, compiled by NVRTC: the shared unary kernel (plugins/_elementwise/unary.cuh) with expf.

:class:`UnaryCuda` is the wrapper of every unary op's cuda plugin (exp, log, tanh, pow, dropout): 16-byte
accesses where x and y are 16-byte aligned, one element per access otherwise, ITEMS of them in flight per
thread.
"""

from __future__ import annotations

from typing import ClassVar

import torch

from kernelzoo.backends.cuda import I64, CudaImplementation
from kernelzoo.registry import Call


class UnaryCuda(CudaImplementation):
    """Base of the unary ops' cuda plugins; a subclass sets ``op`` and, if it has any, ``arguments``."""

    kernel_name: ClassVar[str] = "unary"  # the kernels <kernel_name>_vec and <kernel_name>_scalar
    config_space: ClassVar = {"ITEMS": [1, 2, 4, 8], "THREADS": [128, 256, 512, 1024]}
    default_config: ClassVar = {"ITEMS": 2, "THREADS": 256}

    def arguments(self, call: Call) -> tuple:
        """The kernel's arguments after n: a = 0 (pow passes its exponent)."""
        return (0.0,)

    def run(self, call: Call, config: dict) -> torch.Tensor:
        x = call.inputs["x"].contiguous()
        y = call.empty(x.shape)
        n = x.numel()
        if n == 0:
            return y
        # 16-byte accesses need 16-byte aligned arrays (a contiguous slice may start anywhere)
        pack = 16 // x.element_size() if x.data_ptr() % 16 == 0 and y.data_ptr() % 16 == 0 else 1
        name = f"{self.kernel_name}_{'vec' if pack > 1 else 'scalar'}"
        per_block = config["THREADS"] * config["ITEMS"]
        grid = max(1, -(-(n // pack) // per_block))  # one block at least: it does the n % pack tail
        kernel = self.kernel(name, x.dtype, config)
        kernel(x, y, I64(n), *self.arguments(call), grid=grid, block=config["THREADS"])
        return y


class ExpCuda(UnaryCuda):
    op = "exp"
