"""embedding_backward in Triton: the index positions sorted by index on the device (torch.sort, stable, and
the rows' start offsets), then one program per (table row, BLOCK_D columns) adds its positions' gradient rows
in order and writes its slice once: deterministic, no atomics, no zero-fill pass."""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from kernelzoo.backends.triton import TritonImplementation, cdiv, launcher, next_power_of_2
from kernelzoo.registry import Call

from . import grad_rows, sorted_rows


@triton.jit
def _owner_kernel(g_ptr, order_ptr, starts_ptr, out_ptr, dim, g_stride, padding_idx, BLOCK_D: tl.constexpr):
    v = tl.program_id(0).to(tl.int64)
    col = tl.program_id(1) * BLOCK_D + tl.arange(0, BLOCK_D)
    mask = col < dim
    lo, hi = tl.load(starts_ptr + v), tl.load(starts_ptr + v + 1)
    acc = tl.zeros([BLOCK_D], dtype=tl.float32)
    for p in range(lo, hi):
        i = tl.load(order_ptr + p)
        acc += tl.load(g_ptr + i * g_stride + col, mask=mask, other=0.0).to(tl.float32)
    acc = tl.where(v == padding_idx, 0.0, acc)
    tl.store(out_ptr + v * dim + col, acc.to(out_ptr.dtype.element_ty), mask=mask)


class EmbeddingBackwardTriton(TritonImplementation):
    op = "embedding_backward"
    config_space = {"BLOCK_D": [128, 256, 512, 1024, 2048], "num_warps": [1, 2, 4, 8]}
    default_config = {"BLOCK_D": 512, "num_warps": 4}

    def run(self, call: Call, config: dict) -> torch.Tensor:
        g, dim, num_weights = grad_rows(call)
        p = call.params
        out = call.empty((num_weights, dim))
        if dim:
            order, starts = sorted_rows(call.inputs["indices"], num_weights)
            block_d = min(config["BLOCK_D"], next_power_of_2(dim))
            padding = -1 if p["padding_idx"] is None else p["padding_idx"]
            launcher(_owner_kernel)[(num_weights, cdiv(dim, block_d))](
                g, order, starts, out, dim, g.stride(0), padding, BLOCK_D=block_d, num_warps=config["num_warps"])
        return out
