"""cross_entropy_backward in Triton: a program takes ROWS rows as a 2-D tile (ROWS, COLS) and walks the
classes once: grad = (exp(x − lse) − ε/C − (1 − ε)·[c = t]) · scale, zeros for ignored rows. For "mean" a
one-program kernel counts the non-ignored targets first (on the device: no sync)."""

from __future__ import annotations

import torch
import triton
import triton.language as tl
from kernelzoo_plugins._rows.cross_entropy import REDUCTIONS, from_rows
from kernelzoo_plugins._rows.triton import tile

from kernelzoo.backends.triton import TritonImplementation, cdiv, launcher
from kernelzoo.registry import Call

from . import rows_of


@triton.jit
def _count_kernel(t_ptr, count_ptr, rows, ignore_index, BLOCK: tl.constexpr):
    count = tl.zeros([BLOCK], dtype=tl.float32)
    for start in range(0, rows, BLOCK):
        i = start + tl.arange(0, BLOCK)
        count += tl.where(tl.load(t_ptr + i, mask=i < rows, other=ignore_index) != ignore_index, 1.0, 0.0)
    tl.store(count_ptr, tl.sum(count, axis=0))


@triton.jit
def _ce_grad_kernel(x_ptr, t_ptr, lse_ptr, grad_ptr, count_ptr, out_ptr, rows, c, x_stride, ignore_index,
                    smoothing, REDUCTION: tl.constexpr, ROWS: tl.constexpr, COLS: tl.constexpr):
    row = tl.program_id(0).to(tl.int64) * ROWS + tl.arange(0, ROWS)  # (ROWS,)
    live = row < rows
    t = tl.load(t_ptr + row, mask=live, other=ignore_index)
    if REDUCTION == 0:  # none: a gradient per row
        scale = tl.load(grad_ptr + row, mask=live, other=0.0).to(tl.float32)
    elif REDUCTION == 1:  # mean
        scale = tl.zeros([ROWS], dtype=tl.float32) + tl.load(grad_ptr).to(tl.float32) / tl.load(count_ptr)
    else:  # sum
        scale = tl.zeros([ROWS], dtype=tl.float32) + tl.load(grad_ptr).to(tl.float32)
    scale = tl.where(t != ignore_index, scale, 0.0)[:, None]  # (ROWS, 1)
    lse = tl.load(lse_ptr + row, mask=live, other=0.0)[:, None]
    target = t[:, None]
    spread = smoothing / c
    for start in range(0, c, COLS):
        col = start + tl.arange(0, COLS)[None, :]  # (1, COLS)
        mask = live[:, None] & (col < c)
        x = tl.load(x_ptr + row[:, None] * x_stride + col, mask=mask, other=0.0).to(tl.float32)
        g = tl.exp(x - lse) - spread - tl.where(col == target, 1.0 - smoothing, 0.0)
        g = tl.where(scale == 0.0, 0.0, g * scale)  # ignored rows: exact zeros, whatever the logits
        tl.store(out_ptr + row[:, None] * c + col, g.to(out_ptr.dtype.element_ty), mask=mask)


class CrossEntropyBackwardTriton(TritonImplementation):
    op = "cross_entropy_backward"
    config_space = {"BLOCK": [1024, 2048, 4096, 8192], "num_warps": [4, 8, 16], "num_stages": [1, 2, 3]}
    default_config = {"BLOCK": 4096, "num_warps": 8, "num_stages": 2}

    def run(self, call: Call, config: dict) -> torch.Tensor:
        x2d, target, lse = rows_of(call)
        p = call.params
        rows, classes = x2d.shape
        out = call.empty((rows, classes))
        if rows:
            grad = call.inputs["grad_loss"].reshape(-1).contiguous()
            reduction = REDUCTIONS.index(p["reduction"])
            count = torch.empty((), dtype=torch.float32, device=x2d.device)
            if reduction == 1:
                launcher(_count_kernel)[(1,)](target, count, rows, p["ignore_index"], BLOCK=1024, num_warps=4)
            tile_rows, cols = tile(rows, classes, config["BLOCK"], x2d.device)
            launcher(_ce_grad_kernel)[(cdiv(rows, tile_rows),)](
                x2d, target, lse, grad, count, out, rows, classes, x2d.stride(0), p["ignore_index"],
                p["label_smoothing"], REDUCTION=reduction, ROWS=tile_rows, COLS=cols, num_warps=config["num_warps"],
                num_stages=config["num_stages"])
        return from_rows(out, call.inputs["logits"])
