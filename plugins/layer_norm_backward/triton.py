"""layer_norm_backward in Triton. Each program owns a slot of consecutive rows and a float32 partial row of
grad_weight and grad_bias; a second kernel adds the slots' partials in order (deterministic, no atomics).

* rows that fit (next power of two of N <= BLOCK): a program walks its slot in 2-D tiles of BLOCK // N
  whole rows: x̂, the row means c1 = mean(g), c2 = mean(g·x̂), grad_x, and the partial sums in registers;
* longer rows: a kernel per row writes (c1, c2); then a program per slot walks the row in tiles, each tile
  over all the slot's rows, keeping that tile's partial sums in registers (dy and x read twice).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl
from kernelzoo_plugins._rows.triton import programs_in_flight

from kernelzoo.backends.triton import TritonImplementation, cdiv, launcher, next_power_of_2
from kernelzoo.registry import Call

from . import rows_of


@triton.jit
def _lnb_rows_kernel(dy_ptr, x_ptr, mean_ptr, rstd_ptr, w_ptr, dx_ptr, part_ptr, rows, n, dy_stride, x_stride,
                     rows_per_program, slots, ROWS: tl.constexpr, COLS: tl.constexpr, HAS_W: tl.constexpr):
    pid = tl.program_id(0)
    col = tl.arange(0, COLS)[None, :]  # (1, COLS)
    w = tl.load(w_ptr + col, mask=col < n, other=0.0).to(tl.float32) if HAS_W else 1.0
    acc_w = tl.zeros([ROWS, COLS], dtype=tl.float32)
    acc_b = tl.zeros([ROWS, COLS], dtype=tl.float32)
    r0 = pid.to(tl.int64) * rows_per_program
    end = tl.minimum(r0 + rows_per_program, rows)
    for start in range(r0, end, ROWS):
        row = start + tl.arange(0, ROWS)[:, None]  # (ROWS, 1)
        mask = (row < end) & (col < n)
        x = tl.load(x_ptr + row * x_stride + col, mask=mask, other=0.0).to(tl.float32)
        dy = tl.load(dy_ptr + row * dy_stride + col, mask=mask, other=0.0).to(tl.float32)
        m = tl.load(mean_ptr + row, mask=row < end, other=0.0)
        rs = tl.load(rstd_ptr + row, mask=row < end, other=0.0)
        xh = tl.where(mask, (x - m) * rs, 0.0)
        g = dy * w
        c1 = tl.sum(g, axis=1)[:, None] / n
        c2 = tl.sum(g * xh, axis=1)[:, None] / n
        tl.store(dx_ptr + row * n + col, (rs * (g - c1 - xh * c2)).to(dx_ptr.dtype.element_ty), mask=mask)
        acc_w += dy * xh
        acc_b += dy
    cols = tl.arange(0, COLS)
    tl.store(part_ptr + pid * n + cols, tl.sum(acc_w, axis=0), mask=cols < n)
    tl.store(part_ptr + (slots + pid) * n + cols, tl.sum(acc_b, axis=0), mask=cols < n)


@triton.jit
def _lnb_row_stats_kernel(dy_ptr, x_ptr, mean_ptr, rstd_ptr, w_ptr, stats_ptr, n, dy_stride, x_stride,
                          BLOCK: tl.constexpr, HAS_W: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    m, rs = tl.load(mean_ptr + row), tl.load(rstd_ptr + row)
    a = tl.zeros([BLOCK], dtype=tl.float32)
    c = tl.zeros([BLOCK], dtype=tl.float32)
    for start in range(0, n, BLOCK):
        col = start + tl.arange(0, BLOCK)
        mask = col < n
        x = tl.load(x_ptr + row * x_stride + col, mask=mask, other=0.0).to(tl.float32)
        g = tl.load(dy_ptr + row * dy_stride + col, mask=mask, other=0.0).to(tl.float32)
        if HAS_W:
            g = g * tl.load(w_ptr + col, mask=mask, other=0.0).to(tl.float32)
        a += g
        c += g * tl.where(mask, (x - m) * rs, 0.0)
    tl.store(stats_ptr + 2 * row, tl.sum(a, axis=0) / n)
    tl.store(stats_ptr + 2 * row + 1, tl.sum(c, axis=0) / n)


@triton.jit
def _lnb_looped_kernel(dy_ptr, x_ptr, mean_ptr, rstd_ptr, w_ptr, stats_ptr, dx_ptr, part_ptr, rows, n, dy_stride,
                       x_stride, rows_per_program, slots, BLOCK: tl.constexpr, HAS_W: tl.constexpr):
    pid = tl.program_id(0)
    r0 = pid.to(tl.int64) * rows_per_program
    end = tl.minimum(r0 + rows_per_program, rows)
    for start in range(0, n, BLOCK):
        col = start + tl.arange(0, BLOCK)
        mask = col < n
        w = tl.load(w_ptr + col, mask=mask, other=0.0).to(tl.float32) if HAS_W else 1.0
        acc_w = tl.zeros([BLOCK], dtype=tl.float32)
        acc_b = tl.zeros([BLOCK], dtype=tl.float32)
        for row in range(r0, end):
            x = tl.load(x_ptr + row * x_stride + col, mask=mask, other=0.0).to(tl.float32)
            dy = tl.load(dy_ptr + row * dy_stride + col, mask=mask, other=0.0).to(tl.float32)
            m, rs = tl.load(mean_ptr + row), tl.load(rstd_ptr + row)
            c1, c2 = tl.load(stats_ptr + 2 * row), tl.load(stats_ptr + 2 * row + 1)
            xh = tl.where(mask, (x - m) * rs, 0.0)
            tl.store(dx_ptr + row * n + col, (rs * (dy * w - c1 - xh * c2)).to(dx_ptr.dtype.element_ty), mask=mask)
            acc_w += dy * xh
            acc_b += dy
        tl.store(part_ptr + pid * n + col, acc_w, mask=mask)
        tl.store(part_ptr + (slots + pid) * n + col, acc_b, mask=mask)


@triton.jit
def _lnb_reduce_kernel(part_ptr, out_ptr, slots, n, STEPS: tl.constexpr, COLS: tl.constexpr):
    """out[k] = Σ_s part[k, s] for k = 0 (grad_weight), 1 (grad_bias): axis 1 of the grid; slots in order."""
    col = tl.program_id(0) * COLS + tl.arange(0, COLS)[None, :]  # (1, COLS)
    which = tl.program_id(1)
    acc = tl.zeros([STEPS, COLS], dtype=tl.float32)
    for start in range(0, slots, STEPS):
        s = start + tl.arange(0, STEPS)[:, None]  # (STEPS, 1)
        acc += tl.load(part_ptr + (which * slots + s).to(tl.int64) * n + col, mask=(s < slots) & (col < n),
                       other=0.0)
    total = tl.sum(acc, axis=0)
    cols = tl.program_id(0) * COLS + tl.arange(0, COLS)
    tl.store(out_ptr + which * n + cols, total.to(out_ptr.dtype.element_ty), mask=cols < n)


class LayerNormBackwardTriton(TritonImplementation):
    op = "layer_norm_backward"
    config_space = {"BLOCK": [1024, 2048, 4096, 8192, 16384], "num_warps": [4, 8, 16], "num_stages": [1, 2]}
    # 16 warps at BLOCK 8192: x, dy and the two partial-sum tiles are 16 floats each per thread (8 warps: 32
    # each, ~200 registers with the temporaries, which spills)
    default_config = {"BLOCK": 8192, "num_warps": 16, "num_stages": 1}

    def run(self, call: Call, config: dict) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        dy, x, mean, rstd, n = rows_of(call)
        rows, shape = x.shape[0], call.params["normalized_shape"]
        dx, sums = call.empty((rows, n)), call.empty((2, n))  # sums: grad_weight, grad_bias
        if n:
            w = call.inputs["weight"].contiguous() if "weight" in call.inputs else None
            slots, part = self._rows(dy, x, mean, rstd, w, dx, config)
            cols = min(256, next_power_of_2(n))
            launcher(_lnb_reduce_kernel)[(cdiv(n, cols), 2)](
                part, sums, slots, n, STEPS=16, COLS=cols, num_warps=4)
        return dx.view(call.inputs["x"].shape), sums[0].view(shape), sums[1].view(shape)

    def _rows(self, dy: torch.Tensor, x: torch.Tensor, mean: torch.Tensor, rstd: torch.Tensor,
              w: torch.Tensor | None, dx: torch.Tensor, config: dict) -> tuple[int, torch.Tensor]:
        """Launch the row kernels; (slots, the (2, slots, n) float partial rows of grad_weight and grad_bias)."""
        rows, n = x.shape
        block = config["BLOCK"]
        options = {"num_warps": config["num_warps"], "num_stages": config["num_stages"], "HAS_W": w is not None}
        w_arg = w if w is not None else x  # not read without a weight
        in_flight = programs_in_flight(x.device)
        cols = next_power_of_2(n)
        if cols <= block:
            share = max(1, cdiv(rows, in_flight))  # rows per program to keep the GPU busy
            tile_rows = min(block // cols, next_power_of_2(share))
            per_program = cdiv(share, tile_rows) * tile_rows
            slots = max(1, cdiv(rows, per_program))
            part = torch.empty((2, slots, n), dtype=torch.float32, device=x.device)
            launcher(_lnb_rows_kernel)[(slots,)](dy, x, mean, rstd, w_arg, dx, part, rows, n, dy.stride(0), x.stride(0),
                                                 per_program, slots, ROWS=tile_rows, COLS=cols, **options)
            return slots, part
        stats = torch.empty((rows, 2), dtype=torch.float32, device=x.device)  # (c1, c2) per row
        if rows:
            launcher(_lnb_row_stats_kernel)[(rows,)](dy, x, mean, rstd, w_arg, stats, n, dy.stride(0), x.stride(0),
                                                     BLOCK=block, **options)
        per_program = max(1, cdiv(rows, in_flight))
        slots = cdiv(rows, per_program)
        part = torch.empty((2, slots, n), dtype=torch.float32, device=x.device)
        if slots:
            launcher(_lnb_looped_kernel)[(slots,)](dy, x, mean, rstd, w_arg, stats, dx, part, rows, n, dy.stride(0),
                                                   x.stride(0), per_program, slots, BLOCK=block, **options)
        return slots, part
