"""cross_entropy in Triton: a program takes ROWS rows as a 2-D tile (ROWS, COLS) and walks the classes in
COLS-wide steps, keeping per lane an online max, a rescaled sum of exponentials and (label smoothing) a sum
of the logits: one read of the logits, no probabilities stored. Then lse, the target's logit (one load), the
row's loss; for "mean" and "sum" a second, one-program kernel adds the rows' losses in order.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl
from kernelzoo_plugins._rows.triton import tile

from kernelzoo.backends.triton import TritonImplementation, cdiv, launcher
from kernelzoo.registry import Call

from . import as_rows


@triton.jit
def _ce_rows_kernel(x_ptr, t_ptr, loss_ptr, lse_ptr, rows, c, x_stride, ignore_index, smoothing,
                    ROWS: tl.constexpr, COLS: tl.constexpr, SMOOTH: tl.constexpr):
    row = tl.program_id(0).to(tl.int64) * ROWS + tl.arange(0, ROWS)[:, None]  # (ROWS, 1)
    live = row < rows
    m = tl.full([ROWS, COLS], float("-inf"), tl.float32)
    s = tl.zeros([ROWS, COLS], dtype=tl.float32)
    sx = tl.zeros([ROWS, COLS], dtype=tl.float32)
    for start in range(0, c, COLS):
        col = start + tl.arange(0, COLS)[None, :]  # (1, COLS)
        mask = live & (col < c)
        x = tl.load(x_ptr + row * x_stride + col, mask=mask, other=float("-inf")).to(tl.float32)
        m_new = tl.maximum(m, x)
        m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)  # all -inf so far: exps of 0, not NaN
        s = s * tl.exp(m - m_safe) + tl.exp(x - m_safe)
        m = m_new
        if SMOOTH:
            sx += tl.where(mask, x, 0.0)
    m_row = tl.max(m, axis=1)  # (ROWS,)
    m_row_safe = tl.where(m_row == float("-inf"), 0.0, m_row)
    lse = m_row + tl.log(tl.sum(s * tl.exp(m - m_row_safe[:, None]), axis=1))
    lse = tl.where(m_row == float("-inf"), float("nan"), lse)  # a row of only -inf: NaN, as torch's log_softmax
    rows_1d = tl.program_id(0).to(tl.int64) * ROWS + tl.arange(0, ROWS)
    live_1d = rows_1d < rows
    t = tl.load(t_ptr + rows_1d, mask=live_1d, other=ignore_index)
    valid = t != ignore_index
    picked = tl.load(x_ptr + rows_1d * x_stride + tl.where(valid, t, 0), mask=live_1d & valid, other=0.0)
    loss = lse - picked.to(tl.float32)
    if SMOOTH:
        loss = (1.0 - smoothing) * loss + smoothing * (lse - tl.sum(sx, axis=1) / c)
    tl.store(lse_ptr + rows_1d, lse, mask=live_1d)
    tl.store(loss_ptr + rows_1d, tl.where(valid, loss, 0.0).to(loss_ptr.dtype.element_ty), mask=live_1d)


@triton.jit
def _ce_reduce_kernel(loss_ptr, t_ptr, out_ptr, rows, ignore_index, MEAN: tl.constexpr, BLOCK: tl.constexpr):
    """out = Σ loss (/ the non-ignored count for MEAN: 0 / 0 = NaN), the rows in a fixed order."""
    acc = tl.zeros([BLOCK], dtype=tl.float32)
    count = tl.zeros([BLOCK], dtype=tl.float32)
    for start in range(0, rows, BLOCK):
        i = start + tl.arange(0, BLOCK)
        acc += tl.load(loss_ptr + i, mask=i < rows, other=0.0)
        count += tl.where(tl.load(t_ptr + i, mask=i < rows, other=ignore_index) != ignore_index, 1.0, 0.0)
    total = tl.sum(acc, axis=0)
    if MEAN:
        total = total / tl.sum(count, axis=0)
    tl.store(out_ptr, total.to(out_ptr.dtype.element_ty))


class CrossEntropyTriton(TritonImplementation):
    op = "cross_entropy"
    config_space = {"BLOCK": [1024, 2048, 4096, 8192], "num_warps": [4, 8, 16], "num_stages": [1, 2, 3]}
    default_config = {"BLOCK": 4096, "num_warps": 8, "num_stages": 2}

    def run(self, call: Call, config: dict) -> tuple[torch.Tensor, torch.Tensor]:
        target, p = call.inputs["target"], call.params
        x2d = as_rows(call.inputs["logits"])  # (rows, c), class stride 1
        t = target.reshape(-1).contiguous()
        rows, classes = x2d.shape
        none = p["reduction"] == "none"
        loss = call.empty((rows,)) if none else torch.empty(rows, dtype=torch.float32, device=x2d.device)
        lse = call.empty((rows,), torch.float32)
        if rows:
            tile_rows, cols = tile(rows, classes, config["BLOCK"], x2d.device)
            launcher(_ce_rows_kernel)[(cdiv(rows, tile_rows),)](
                x2d, t, loss, lse, rows, classes, x2d.stride(0), p["ignore_index"], p["label_smoothing"],
                ROWS=tile_rows, COLS=cols, SMOOTH=p["label_smoothing"] != 0, num_warps=config["num_warps"],
                num_stages=config["num_stages"])
        if none:
            return loss.view(target.shape), lse.view(target.shape)
        total = call.empty(())
        launcher(_ce_reduce_kernel)[(1,)](
            loss, t, total, rows, p["ignore_index"], MEAN=p["reduction"] == "mean", BLOCK=1024, num_warps=4)
        return total, lse.view(target.shape)
