"""relu in Triton: one program per BLOCK elements."""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from kernelzoo.backends.triton import TritonImplementation, cdiv, launcher
from kernelzoo.registry import Call


@triton.jit
def _relu_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    x = tl.load(x_ptr + offsets, mask=mask)
    tl.store(y_ptr + offsets, tl.where(x < 0, 0.0, x).to(x.dtype), mask=mask)


class ReluTriton(TritonImplementation):
    op = "relu"
    config_space = {"BLOCK": [512, 1024, 2048, 4096, 8192], "num_warps": [2, 4, 8, 16]}
    default_config = {"BLOCK": 2048, "num_warps": 8}

    def run(self, call: Call, config: dict) -> torch.Tensor:
        x = call.inputs["x"].contiguous()
        y = call.empty(x.shape)
        n = x.numel()
        if n:
            grid = (cdiv(n, config["BLOCK"]),)
            launcher(_relu_kernel)[grid](x, y, n, BLOCK=config["BLOCK"], num_warps=config["num_warps"])
        return y
