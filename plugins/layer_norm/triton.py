"""layer_norm in Triton, two paths chosen by the row length against BLOCK (the elements a program holds):

* rows that fit (next power of two of N <= BLOCK): a program loads BLOCK // N whole rows as one 2-D tile,
  takes the mean, then the variance of the deviations held in registers (two-pass, exact), and writes y:
  x read once, y written once;
* longer rows: a program per row loops twice: shifted sums Σ(x − K), Σ(x − K)² with K = the row's first
  element (no cancellation when the mean is far from 0), then y; the second read mostly hits L2.
"""

from __future__ import annotations

import math

import torch
import triton
import triton.language as tl
from kernelzoo_plugins._rows.triton import programs_in_flight

from kernelzoo.backends.triton import TritonImplementation, cdiv, launcher, next_power_of_2
from kernelzoo.registry import Call

from . import as_rows, stats_shape


@triton.jit
def _affine(y, w_ptr, b_ptr, col, mask, HAS_W: tl.constexpr, HAS_B: tl.constexpr):
    if HAS_W:
        y = y * tl.load(w_ptr + col, mask=mask, other=0.0).to(tl.float32)
    if HAS_B:
        y = y + tl.load(b_ptr + col, mask=mask, other=0.0).to(tl.float32)
    return y


@triton.jit
def _ln_rows_kernel(x_ptr, w_ptr, b_ptr, y_ptr, mean_ptr, rstd_ptr, rows, n, x_stride, eps,
                    ROWS: tl.constexpr, COLS: tl.constexpr, HAS_W: tl.constexpr, HAS_B: tl.constexpr):
    row = tl.program_id(0).to(tl.int64) * ROWS + tl.arange(0, ROWS)[:, None]  # (ROWS, 1)
    col = tl.arange(0, COLS)[None, :]  # (1, COLS)
    mask = (row < rows) & (col < n)
    x = tl.load(x_ptr + row * x_stride + col, mask=mask, other=0.0).to(tl.float32)
    mean = tl.sum(x, axis=1) / n  # (ROWS,)
    d = tl.where(mask, x - mean[:, None], 0.0)
    var = tl.sum(d * d, axis=1) / n
    rstd = 1.0 / tl.sqrt(var + eps)
    y = _affine(d * rstd[:, None], w_ptr, b_ptr, col, col < n, HAS_W, HAS_B)
    tl.store(y_ptr + row * n + col, y.to(y_ptr.dtype.element_ty), mask=mask)
    rows_1d = tl.program_id(0).to(tl.int64) * ROWS + tl.arange(0, ROWS)
    tl.store(mean_ptr + rows_1d, tl.where(var != var, float("nan"), mean), mask=rows_1d < rows)
    tl.store(rstd_ptr + rows_1d, rstd, mask=rows_1d < rows)


@triton.jit
def _ln_looped_kernel(x_ptr, w_ptr, b_ptr, y_ptr, mean_ptr, rstd_ptr, n, x_stride, eps,
                      BLOCK: tl.constexpr, HAS_W: tl.constexpr, HAS_B: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    x_row = x_ptr + row * x_stride
    k = tl.load(x_row).to(tl.float32)
    s1 = tl.zeros([BLOCK], dtype=tl.float32)
    s2 = tl.zeros([BLOCK], dtype=tl.float32)
    for start in range(0, n, BLOCK):
        col = start + tl.arange(0, BLOCK)
        d = tl.load(x_row + col, mask=col < n, other=0.0).to(tl.float32) - k
        d = tl.where(col < n, d, 0.0)
        s1 += d
        s2 += d * d
    shift = tl.sum(s1, axis=0) / n
    var = tl.sum(s2, axis=0) / n - shift * shift
    var = tl.where(var < 0.0, 0.0, var)  # a tiny negative from rounding; NaN stays NaN
    mean = k + shift
    rstd = 1.0 / tl.sqrt(var + eps)
    tl.store(mean_ptr + row, tl.where(var != var, float("nan"), mean))
    tl.store(rstd_ptr + row, rstd)
    for start in range(0, n, BLOCK):
        col = start + tl.arange(0, BLOCK)
        x = tl.load(x_row + col, mask=col < n, other=0.0).to(tl.float32)
        y = _affine((x - mean) * rstd, w_ptr, b_ptr, col, col < n, HAS_W, HAS_B)
        tl.store(y_ptr + row * n + col, y.to(y_ptr.dtype.element_ty), mask=col < n)


class LayerNormTriton(TritonImplementation):
    op = "layer_norm"
    config_space = {"BLOCK": [1024, 2048, 4096, 8192, 16384], "num_warps": [4, 8, 16], "num_stages": [1, 2]}
    default_config = {"BLOCK": 8192, "num_warps": 8, "num_stages": 1}

    def run(self, call: Call, config: dict) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        x, shape = call.inputs["x"], call.params["normalized_shape"]
        n = math.prod(shape)
        x2d = as_rows(x, n)  # (rows, n), column stride 1
        rows = x2d.shape[0]
        y = call.empty((rows, n))
        mean, rstd = call.empty((rows,), torch.float32), call.empty((rows,), torch.float32)
        w, b = call.inputs.get("weight"), call.inputs.get("bias")
        w, b = (t.contiguous() if t is not None else None for t in (w, b))
        if n == 0:
            mean.fill_(math.nan), rstd.fill_(math.nan)
        elif rows:
            block = config["BLOCK"]
            options = {"num_warps": config["num_warps"], "num_stages": config["num_stages"],
                       "HAS_W": w is not None, "HAS_B": b is not None}
            args = (x2d, w if w is not None else x2d, b if b is not None else x2d, y, mean, rstd)  # unread when absent
            cols = next_power_of_2(n)
            if cols <= block:
                # as many whole rows as BLOCK holds, but no fewer programs than the GPU runs at once
                in_flight = programs_in_flight(x.device)
                per_program = min(block // cols, next_power_of_2(cdiv(rows, in_flight)))
                launcher(_ln_rows_kernel)[(cdiv(rows, per_program),)](
                    *args, rows, n, x2d.stride(0), call.params["eps"], ROWS=per_program, COLS=cols, **options)
            else:
                launcher(_ln_looped_kernel)[(rows,)](
                    *args, n, x2d.stride(0), call.params["eps"], BLOCK=block, **options)
        stats = stats_shape(x, shape)
        return y.view(x.shape), mean.view(stats), rstd.view(stats)
