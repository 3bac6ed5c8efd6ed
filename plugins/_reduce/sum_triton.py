"""sum and mean in Triton over x as (outer, reduced, inner):

* inner = 1 (rows): a program sums ROWS rows of up to BLOCK // ROWS elements per step, a 2-D tile
  (ROWS, COLS) of float32 lanes folded once at the end;
* inner > 1 (columns): a program sums a (steps, COLS) tile of rows × columns per step, columns
  contiguous, and folds the rows at the end.

When that gives fewer programs than the GPU runs at once (one long row, a few columns), the reduced
dim is split into chunks: each program writes a float32 partial, a second kernel adds a row's partials
in chunk order (deterministic) and scales.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl
from kernelzoo_plugins._reduce.plan import as_3d
from kernelzoo_plugins._rows.triton import chunking, programs_in_flight

from kernelzoo.backends.triton import TritonImplementation, cdiv, launcher, next_power_of_2
from kernelzoo.registry import Call


@triton.jit
def _sum_rows_kernel(x_ptr, out_ptr, outer, reduced, chunk_len, chunks, scale,
                     ROWS: tl.constexpr, COLS: tl.constexpr, PARTIAL: tl.constexpr):
    row = tl.program_id(0).to(tl.int64) * ROWS + tl.arange(0, ROWS)[:, None]  # (ROWS, 1)
    chunk = tl.program_id(1)
    lo = chunk * chunk_len
    hi = tl.minimum(lo + chunk_len, reduced)
    acc = tl.zeros([ROWS, COLS], dtype=tl.float32)
    for start in range(lo, hi, COLS):
        col = start + tl.arange(0, COLS)[None, :]  # (1, COLS)
        acc += tl.load(x_ptr + row * reduced + col, mask=(row < outer) & (col < hi), other=0.0).to(tl.float32)
    total = tl.sum(acc, axis=1)  # (ROWS,)
    rows = tl.program_id(0).to(tl.int64) * ROWS + tl.arange(0, ROWS)
    if PARTIAL:
        tl.store(out_ptr + rows * chunks + chunk, total, mask=rows < outer)
    else:
        tl.store(out_ptr + rows, (total * scale).to(out_ptr.dtype.element_ty), mask=rows < outer)


@triton.jit
def _sum_cols_kernel(x_ptr, out_ptr, reduced, inner, tiles, chunk_len, chunks, scale,
                     STEPS: tl.constexpr, COLS: tl.constexpr, PARTIAL: tl.constexpr):
    a = tl.program_id(0).to(tl.int64) // tiles  # axis 0 (up to 2^31 programs): outer x column tiles
    col = (tl.program_id(0) % tiles) * COLS + tl.arange(0, COLS)  # (COLS,)
    chunk = tl.program_id(1)
    lo = chunk * chunk_len
    hi = tl.minimum(lo + chunk_len, reduced)
    acc = tl.zeros([STEPS, COLS], dtype=tl.float32)
    for start in range(lo, hi, STEPS):
        r = start + tl.arange(0, STEPS)[:, None]  # (STEPS, 1)
        offsets = (a * reduced + r) * inner + col[None, :]
        acc += tl.load(x_ptr + offsets, mask=(r < hi) & (col[None, :] < inner), other=0.0).to(tl.float32)
    total = tl.sum(acc, axis=0)  # (COLS,)
    if PARTIAL:
        tl.store(out_ptr + (a * chunks + chunk) * inner + col, total, mask=col < inner)
    else:
        tl.store(out_ptr + a * inner + col, (total * scale).to(out_ptr.dtype.element_ty), mask=col < inner)


@triton.jit
def _sum_partials_kernel(partial_ptr, out_ptr, outputs, inner, chunks, scale, BLOCK: tl.constexpr):
    """out[a, b] = scale · Σ_c partial[a, c, b], c in order; one lane per output."""
    i = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = i < outputs
    a, b = i // inner, i % inner
    acc = tl.zeros([BLOCK], dtype=tl.float32)
    for c in range(0, chunks):
        acc += tl.load(partial_ptr + (a * chunks + c) * inner + b, mask=mask, other=0.0)
    tl.store(out_ptr + i, (acc * scale).to(out_ptr.dtype.element_ty), mask=mask)


class SummationTriton(TritonImplementation):
    """Base of sum's and mean's Triton plugins: the kernels above, the op's scale passed in."""

    # BLOCK: elements a program holds per step; COLS_MAX: widest column tile of the inner > 1 kernel
    config_space = {"BLOCK": [1024, 2048, 4096, 8192], "COLS_MAX": [64, 128, 256],
                    "num_warps": [4, 8, 16], "num_stages": [1, 2, 3]}
    default_config = {"BLOCK": 4096, "COLS_MAX": 128, "num_warps": 8, "num_stages": 2}

    def run(self, call: Call, config: dict) -> torch.Tensor:
        p = call.op.plan(call)
        x3 = as_3d(call.inputs["x"], p)  # (outer, reduced, inner)
        out = call.empty((p.outer, p.inner))
        if out.numel():
            self._launch(x3, out, call.op.scale(call), config)
        return out.view(p.out_shape)

    def _launch(self, x3: torch.Tensor, out: torch.Tensor, scale: float, config: dict) -> None:
        outer, reduced, inner = x3.shape
        block = config["BLOCK"]
        options = {"num_warps": config["num_warps"], "num_stages": config["num_stages"]}
        in_flight = programs_in_flight(x3.device)
        if inner == 1:
            cols = min(block, next_power_of_2(max(reduced, 1)))
            rows = min(block // cols, next_power_of_2(cdiv(outer, in_flight)))
            programs = cdiv(outer, rows)
            chunk_len, chunks = chunking(reduced, cols, programs, in_flight)
            target = out if chunks == 1 else torch.empty((outer, chunks), dtype=torch.float32, device=x3.device)
            launcher(_sum_rows_kernel)[(programs, chunks)](
                x3, target, outer, reduced, chunk_len, chunks, scale, ROWS=rows, COLS=cols, PARTIAL=chunks > 1,
                **options)
        else:
            cols = min(config["COLS_MAX"], next_power_of_2(inner))
            steps = block // cols
            tiles = cdiv(inner, cols)
            programs = outer * tiles
            chunk_len, chunks = chunking(reduced, steps, programs, in_flight)
            target = out if chunks == 1 else torch.empty((outer, chunks, inner), dtype=torch.float32,
                                                         device=x3.device)
            launcher(_sum_cols_kernel)[(outer * tiles, chunks)](
                x3, target, reduced, inner, tiles, chunk_len, chunks, scale, STEPS=steps, COLS=cols,
                PARTIAL=chunks > 1, **options)
        if chunks > 1:
            final = 1024
            launcher(_sum_partials_kernel)[(cdiv(outer * inner, final),)](
                target, out, outer * inner, inner, chunks, scale, BLOCK=final, num_warps=4)
