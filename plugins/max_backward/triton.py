"""max's gradient in Triton, as a gather that writes every element of grad_x (viewed as (outer, reduced,
inner)) once: grad_x[a, r, b] = grad[a, b] where indices[a, b] == r, else 0. A program writes one tile:

* inner = 1 (rows): ROWS rows × COLS contiguous elements of each, reading ROWS indices and grads;
* inner > 1 (columns): STEPS rows × COLS contiguous columns of one plane a, reading COLS indices and grads.

Tiles are numbered along axis 0 of the grid only (axes 1 and 2 stop at 65535 on CUDA).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from kernelzoo.backends.triton import TritonImplementation, cdiv, launcher, next_power_of_2
from kernelzoo.registry import Call


@triton.jit
def _max_backward_rows_kernel(g_ptr, idx_ptr, out_ptr, outer, reduced, col_tiles,
                              ROWS: tl.constexpr, COLS: tl.constexpr):
    tile = tl.program_id(0).to(tl.int64)
    row = (tile // col_tiles) * ROWS + tl.arange(0, ROWS)  # (ROWS,)
    col = (tile % col_tiles) * COLS + tl.arange(0, COLS)  # (COLS,)
    index = tl.load(idx_ptr + row, mask=row < outer, other=-1)
    g = tl.load(g_ptr + row, mask=row < outer, other=0.0)
    out = tl.where(col[None, :] == index[:, None], g[:, None], 0.0)  # (ROWS, COLS)
    tl.store(out_ptr + row[:, None] * reduced + col[None, :], out.to(out_ptr.dtype.element_ty),
             mask=(row[:, None] < outer) & (col[None, :] < reduced))


@triton.jit
def _max_backward_cols_kernel(g_ptr, idx_ptr, out_ptr, reduced, inner, step_tiles, col_tiles,
                              STEPS: tl.constexpr, COLS: tl.constexpr):
    tile = tl.program_id(0).to(tl.int64)
    a = tile // (step_tiles * col_tiles)
    r = (tile // col_tiles % step_tiles) * STEPS + tl.arange(0, STEPS)  # (STEPS,)
    col = (tile % col_tiles) * COLS + tl.arange(0, COLS)  # (COLS,)
    index = tl.load(idx_ptr + a * inner + col, mask=col < inner, other=-1)
    g = tl.load(g_ptr + a * inner + col, mask=col < inner, other=0.0)
    out = tl.where(r[:, None] == index[None, :], g[None, :], 0.0)  # (STEPS, COLS)
    tl.store(out_ptr + (a * reduced + r[:, None]) * inner + col[None, :], out.to(out_ptr.dtype.element_ty),
             mask=(r[:, None] < reduced) & (col[None, :] < inner))


class MaxBackwardTriton(TritonImplementation):
    op = "max_backward"
    # BLOCK: elements of grad_x a program writes; COLS_MAX: widest column tile of the inner > 1 kernel
    config_space = {"BLOCK": [1024, 2048, 4096, 8192], "COLS_MAX": [64, 128, 256], "num_warps": [2, 4, 8]}
    default_config = {"BLOCK": 4096, "COLS_MAX": 128, "num_warps": 4}

    def run(self, call: Call, config: dict) -> torch.Tensor:
        p = call.op.plan(call)
        grad_x = call.empty(call.params["input_shape"])
        if grad_x.numel() == 0:
            return grad_x
        g, indices = call.inputs["grad"].contiguous(), call.inputs["indices"].contiguous()
        block, warps = config["BLOCK"], config["num_warps"]
        if p.inner == 1:
            cols = min(block, next_power_of_2(p.reduced))
            rows = block // cols
            col_tiles = cdiv(p.reduced, cols)
            grid = (cdiv(p.outer, rows) * col_tiles,)
            launcher(_max_backward_rows_kernel)[grid](
                g, indices, grad_x, p.outer, p.reduced, col_tiles, ROWS=rows, COLS=cols, num_warps=warps)
        else:
            cols = min(config["COLS_MAX"], next_power_of_2(p.inner))
            steps = min(block // cols, next_power_of_2(p.reduced))
            step_tiles, col_tiles = cdiv(p.reduced, steps), cdiv(p.inner, cols)
            grid = (p.outer * step_tiles * col_tiles,)
            launcher(_max_backward_cols_kernel)[grid](g, indices, grad_x, p.reduced, p.inner, step_tiles, col_tiles,
                                                      STEPS=steps, COLS=cols, num_warps=warps)
        return grad_x
