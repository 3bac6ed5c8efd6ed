"""embedding in Triton: a program gathers a (BLOCK_N indices, BLOCK_D columns) tile of rows."""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from kernelzoo.backends.triton import TritonImplementation, cdiv, launcher, next_power_of_2
from kernelzoo.registry import Call


@triton.jit
def _gather_kernel(w_ptr, idx_ptr, out_ptr, n, dim, w_stride, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr):
    i = tl.program_id(0).to(tl.int64) * BLOCK_N + tl.arange(0, BLOCK_N)  # (BLOCK_N,)
    col = tl.program_id(1) * BLOCK_D + tl.arange(0, BLOCK_D)[None, :]  # (1, BLOCK_D)
    row = tl.load(idx_ptr + i, mask=i < n, other=0).to(tl.int64)[:, None]
    mask = (i[:, None] < n) & (col < dim)
    tl.store(out_ptr + i[:, None] * dim + col, tl.load(w_ptr + row * w_stride + col, mask=mask), mask=mask)


class EmbeddingTriton(TritonImplementation):
    op = "embedding"
    # BLOCK: elements a program moves (BLOCK_D columns of BLOCK // BLOCK_D indices)
    config_space = {"BLOCK": [1024, 2048, 4096, 8192], "BLOCK_D": [128, 256, 512, 1024], "num_warps": [2, 4, 8]}
    default_config = {"BLOCK": 4096, "BLOCK_D": 512, "num_warps": 4}

    def run(self, call: Call, config: dict) -> torch.Tensor:
        weight, indices = call.inputs["weight"], call.inputs["indices"]
        w = weight if weight.stride(1) == 1 else weight.contiguous()  # rows may be any stride apart
        idx = indices.reshape(-1).contiguous()
        n, dim = idx.numel(), w.shape[1]
        out = call.empty((n, dim))
        if n and dim:
            block_d = min(config["BLOCK_D"], next_power_of_2(dim))
            block_n = max(1, config["BLOCK"] // block_d)
            grid = (cdiv(n, block_n), cdiv(dim, block_d))
            launcher(_gather_kernel)[grid](w, idx, out, n, dim, w.stride(0), BLOCK_N=block_n, BLOCK_D=block_d,
                                           num_warps=config["num_warps"])
        return out.view(*indices.shape, dim)
