"""max in Triton over x as (outer, reduced, inner):

* inner = 1 (rows): a program scans ROWS rows in tiles of (ROWS, COLS) elements;
* inner > 1 (columns): a program scans a (STEPS, COLS) tile of rows × columns per step, columns contiguous.

Each lane keeps a running (value, index): it takes an element greater than its value, or the first NaN,
so it holds its first occurrence of its max. At the end the lanes are folded: the first NaN's index if a
lane holds a NaN, else the smallest index among the lanes holding the largest value. Only tl.max, tl.min
and tl.where, whose NaN handling is the same in the interpreter and on the GPU (NaN is masked to -inf
before tl.max). When that gives fewer programs than the GPU runs at once (one long row, a few columns),
the reduced dim is split into chunks: each program writes a partial (value, index), a second kernel
merges a run's partials in chunk order.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl
from kernelzoo_plugins._rows.triton import chunking, programs_in_flight

from kernelzoo.backends.triton import TritonImplementation, cdiv, launcher, next_power_of_2
from kernelzoo.registry import Call

from . import as_3d, index_output

_NO_INDEX = tl.constexpr(2**62)  # above any index: tl.min ignores lanes that hold it


@triton.jit
def _update(best, at, v, index, valid):
    """A lane's running (value, index) after element ``v`` at ``index``; at < 0 means none yet."""
    take = valid & ((v > best) | ((v != v) & (best == best)) | (at < 0))
    return tl.where(take, v, best), tl.where(take, index, at)


@triton.jit
def _fold(best, at, AXIS: tl.constexpr):
    """The lanes' (value, first index) along AXIS: a NaN lane's first index wins, else the largest value's."""
    nan = best != best
    nan_at = tl.min(tl.where(nan, at, _NO_INDEX), axis=AXIS)
    top = tl.max(tl.where(nan | (at < 0), float("-inf"), best), axis=AXIS)
    top_at = tl.min(tl.where((at >= 0) & (best == tl.expand_dims(top, AXIS)), at, _NO_INDEX), axis=AXIS)
    has_nan = nan_at < _NO_INDEX
    return tl.where(has_nan, float("nan"), top), tl.where(has_nan, nan_at, top_at)


@triton.jit
def _chunk(chunk_len, reduced):
    """This program's chunk (axis 1 of the grid) and the [lo, hi) of the reduced dim it scans."""
    chunk = tl.program_id(1)
    lo = chunk.to(tl.int64) * chunk_len
    return chunk, lo, tl.minimum(lo + chunk_len, reduced)


@triton.jit
def _no_lanes(R: tl.constexpr, C: tl.constexpr):
    """(R, C) lanes' running (value, index) before any element: -inf, and -1 for none."""
    return tl.full([R, C], float("-inf"), tl.float32), tl.full([R, C], -1, tl.int64)


@triton.jit
def _max_rows_kernel(x_ptr, values_ptr, indices_ptr, outer, reduced, chunk_len, chunks,
                     ROWS: tl.constexpr, COLS: tl.constexpr):
    row = tl.program_id(0).to(tl.int64) * ROWS + tl.arange(0, ROWS)[:, None]  # (ROWS, 1)
    chunk, lo, hi = _chunk(chunk_len, reduced)
    best, at = _no_lanes(ROWS, COLS)
    for start in range(lo, hi, COLS):
        col = start + tl.arange(0, COLS)[None, :].to(tl.int64)  # (1, COLS)
        valid = (row < outer) & (col < hi)
        v = tl.load(x_ptr + row * reduced + col, mask=valid, other=float("-inf")).to(tl.float32)
        best, at = _update(best, at, v, col, valid)
    value, index = _fold(best, at, 1)  # (ROWS,)
    rows = tl.program_id(0).to(tl.int64) * ROWS + tl.arange(0, ROWS)
    # partials are float32 (outer, chunks); with one chunk, the outputs themselves
    tl.store(values_ptr + rows * chunks + chunk, value.to(values_ptr.dtype.element_ty), mask=rows < outer)
    tl.store(indices_ptr + rows * chunks + chunk, index, mask=rows < outer)


@triton.jit
def _max_cols_kernel(x_ptr, values_ptr, indices_ptr, reduced, inner, tiles, chunk_len, chunks,
                     STEPS: tl.constexpr, COLS: tl.constexpr):
    a = tl.program_id(0).to(tl.int64) // tiles  # axis 0 (up to 2^31 programs): outer x column tiles
    col = (tl.program_id(0) % tiles) * COLS + tl.arange(0, COLS)  # (COLS,)
    chunk, lo, hi = _chunk(chunk_len, reduced)
    best, at = _no_lanes(STEPS, COLS)
    for start in range(lo, hi, STEPS):
        r = start + tl.arange(0, STEPS)[:, None].to(tl.int64)  # (STEPS, 1)
        valid = (r < hi) & (col[None, :] < inner)
        v = tl.load(x_ptr + (a * reduced + r) * inner + col[None, :], mask=valid, other=float("-inf"))
        best, at = _update(best, at, v.to(tl.float32), r, valid)
    value, index = _fold(best, at, 0)  # (COLS,)
    # partials are float32 (outer, chunks, inner); with one chunk, the outputs themselves
    out = (a * chunks + chunk) * inner + col
    tl.store(values_ptr + out, value.to(values_ptr.dtype.element_ty), mask=col < inner)
    tl.store(indices_ptr + out, index, mask=col < inner)


@triton.jit
def _max_partials_kernel(part_v_ptr, part_i_ptr, values_ptr, indices_ptr, outputs, inner, chunks,
                         BLOCK: tl.constexpr):
    """values[a, b], indices[a, b] = the partials [a, c, b] merged in chunk order c; one lane per output."""
    i = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = i < outputs
    a, b = i // inner, i % inner
    best = tl.full([BLOCK], float("-inf"), tl.float32)
    at = tl.full([BLOCK], -1, tl.int64)
    for c in range(0, chunks):
        v = tl.load(part_v_ptr + (a * chunks + c) * inner + b, mask=mask, other=float("-inf"))
        index = tl.load(part_i_ptr + (a * chunks + c) * inner + b, mask=mask, other=0)
        best, at = _update(best, at, v, index, mask)
    tl.store(values_ptr + i, best.to(values_ptr.dtype.element_ty), mask=mask)
    tl.store(indices_ptr + i, at, mask=mask)


class MaxTriton(TritonImplementation):
    op = "max"
    # BLOCK: elements a program holds per step; COLS_MAX: widest column tile of the inner > 1 kernel
    config_space = {"BLOCK": [1024, 2048, 4096], "COLS_MAX": [64, 128, 256],
                    "num_warps": [4, 8, 16], "num_stages": [1, 2, 3]}
    default_config = {"BLOCK": 2048, "COLS_MAX": 128, "num_warps": 8, "num_stages": 2}

    def run(self, call: Call, config: dict) -> tuple[torch.Tensor, torch.Tensor]:
        p = call.op.plan(call)
        values, indices = call.empty(p.out_shape), index_output(call, p.out_shape)
        if values.numel():
            self._launch(as_3d(call.inputs["x"], p), values, indices, config)
        return values, indices

    def _launch(self, x3: torch.Tensor, values: torch.Tensor, indices: torch.Tensor, config: dict) -> None:
        outer, reduced, inner = x3.shape
        block = config["BLOCK"]
        options = {"num_warps": config["num_warps"], "num_stages": config["num_stages"]}
        in_flight = programs_in_flight(x3.device)
        if inner == 1:
            cols = min(block, next_power_of_2(reduced))
            rows = min(block // cols, next_power_of_2(cdiv(outer, in_flight)))
            programs = cdiv(outer, rows)
            chunk_len, chunks = chunking(reduced, cols, programs, in_flight)
            grid, partial_shape = (programs, chunks), (outer, chunks)
        else:
            cols = min(config["COLS_MAX"], next_power_of_2(inner))
            steps = block // cols
            tiles = cdiv(inner, cols)
            chunk_len, chunks = chunking(reduced, steps, outer * tiles, in_flight)
            grid, partial_shape = (outer * tiles, chunks), (outer, chunks, inner)
        part_v, part_i = values, indices
        if chunks > 1:
            part_v = torch.empty(partial_shape, dtype=torch.float32, device=x3.device)
            part_i = torch.empty(partial_shape, dtype=torch.int64, device=x3.device)
        if inner == 1:
            launcher(_max_rows_kernel)[grid](
                x3, part_v, part_i, outer, reduced, chunk_len, chunks, ROWS=rows, COLS=cols, **options)
        else:
            launcher(_max_cols_kernel)[grid](x3, part_v, part_i, reduced, inner, tiles, chunk_len, chunks, STEPS=steps,
                                             COLS=cols, **options)
        if chunks > 1:
            final = 1024
            launcher(_max_partials_kernel)[(cdiv(outer * inner, final),)](
                part_v, part_i, values, indices, outer * inner, inner, chunks, BLOCK=final, num_warps=4)
