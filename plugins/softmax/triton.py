"""softmax in Triton, with three paths chosen by the row length against BLOCK (the elements a
program holds at once):

* rows that fit (next power of two of cols <= BLOCK): one load per program of BLOCK // COLS whole
  rows, so x is read once and y written once;
* long rows, many of them: one program per row loops over it twice, an online max and rescaled
  sum, then y = exp(x - max) / sum. A row too long for registers is read twice either way; the
  online sum makes it two passes, not three, and the second can hit L2 (the row was just read);
* long rows, fewer than the GPU has programs in flight: each row is split into chunks, one
  kernel writes each chunk's (max, sum), a second merges them and writes its chunk.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl
from kernelzoo_plugins._rows.softmax import RowKernels
from kernelzoo_plugins._rows.triton import programs_in_flight

from kernelzoo.backends.triton import TritonImplementation, cdiv, launcher, next_power_of_2


@triton.jit
def _softmax_rows_kernel(x_ptr, y_ptr, rows, cols, x_row_stride,
                         ROWS: tl.constexpr, COLS: tl.constexpr):
    row = tl.program_id(0).to(tl.int64) * ROWS + tl.arange(0, ROWS)[:, None]  # (ROWS, 1)
    col = tl.arange(0, COLS)[None, :]  # (1, COLS)
    # rows past the end re-read the last row (and are not stored), so that they compute nothing
    # out of range and no -inf - -inf
    x_offsets = tl.minimum(row, rows - 1) * x_row_stride + col
    x = tl.load(x_ptr + x_offsets, mask=col < cols, other=float("-inf")).to(tl.float32)
    # padding columns are -inf: exp(-inf - max) = 0 for a finite or +inf max; a max of -inf
    # (a row of only -inf) gives NaN, as torch does for such a row
    e = tl.exp(x - tl.max(x, axis=1)[:, None])
    y = e * (1.0 / tl.sum(e, axis=1))[:, None]
    tl.store(y_ptr + row * cols + col, y.to(y_ptr.dtype.element_ty), mask=(row < rows) & (col < cols))


@triton.jit
def _online_stats(x_row, lo, hi, BLOCK: tl.constexpr):
    """(max, sum of exp(x - max)) of x_row[lo:hi], online: one pass, a running max and sum per lane.

    Per-lane state costs a second exp per element but no cross-warp reduction (and barrier) per
    block, so the loads of the next block are not held up; the GPU has exp throughput to spare
    for a memory-bound kernel. A lane whose max is still -inf subtracts 0 instead, so that
    exp(-inf - -inf) = NaN does not poison rows whose finite values come later.
    """
    m = tl.full([BLOCK], float("-inf"), tl.float32)
    s = tl.zeros([BLOCK], tl.float32)
    for start in range(lo, hi, BLOCK):
        offsets = start + tl.arange(0, BLOCK)
        x = tl.load(x_row + offsets, mask=offsets < hi, other=float("-inf")).to(tl.float32)
        m_new = tl.maximum(m, x)
        m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)
        s = s * tl.exp(m - m_safe) + tl.exp(x - m_safe)
        m = m_new
    m_row = tl.max(m, axis=0)
    m_row_safe = tl.where(m_row == float("-inf"), 0.0, m_row)
    return m_row, tl.sum(s * tl.exp(m - m_row_safe), axis=0)


@triton.jit
def _write_scaled_exp(x_row, y_row, lo, hi, m, s, BLOCK: tl.constexpr):
    """y_row[lo:hi] = exp(x - m) / s; m = -inf (a row of only -inf) makes it NaN, as in torch."""
    inv = 1.0 / s
    for start in range(lo, hi, BLOCK):
        offsets = start + tl.arange(0, BLOCK)
        mask = offsets < hi
        x = tl.load(x_row + offsets, mask=mask, other=0.0).to(tl.float32)
        tl.store(y_row + offsets, (tl.exp(x - m) * inv).to(y_row.dtype.element_ty), mask=mask)


@triton.jit
def _softmax_looped_kernel(x_ptr, y_ptr, cols, x_row_stride, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    x_row, y_row = x_ptr + row * x_row_stride, y_ptr + row * cols
    m, s = _online_stats(x_row, 0, cols, BLOCK)
    _write_scaled_exp(x_row, y_row, 0, cols, m, s, BLOCK)


@triton.jit
def _softmax_chunk_stats_kernel(x_ptr, stats_ptr, cols, x_row_stride, chunk_len, chunks,
                                BLOCK: tl.constexpr):
    row, chunk = tl.program_id(0).to(tl.int64), tl.program_id(1)
    lo = chunk * chunk_len
    m, s = _online_stats(x_ptr + row * x_row_stride, lo, tl.minimum(lo + chunk_len, cols), BLOCK)
    tl.store(stats_ptr + (row * chunks + chunk) * 2, m)
    tl.store(stats_ptr + (row * chunks + chunk) * 2 + 1, s)


@triton.jit
def _softmax_chunk_write_kernel(x_ptr, y_ptr, stats_ptr, cols, x_row_stride, chunk_len, chunks,
                                CHUNKS: tl.constexpr, BLOCK: tl.constexpr):
    row, chunk = tl.program_id(0).to(tl.int64), tl.program_id(1)
    i = tl.arange(0, CHUNKS)
    part = stats_ptr + (row * chunks + i) * 2
    part_m = tl.load(part, mask=i < chunks, other=float("-inf"))
    part_s = tl.load(part + 1, mask=i < chunks, other=0.0)
    # a chunk with max -inf has sum 0: exp(-inf - M) = 0 keeps it out (M = -inf: subtract 0)
    m = tl.max(part_m, axis=0)
    m_safe = tl.where(m == float("-inf"), 0.0, m)
    s = tl.sum(part_s * tl.exp(part_m - m_safe), axis=0)
    lo = chunk * chunk_len
    _write_scaled_exp(x_ptr + row * x_row_stride, y_ptr + row * cols, lo,
                      tl.minimum(lo + chunk_len, cols), m, s, BLOCK)


class SoftmaxTriton(RowKernels, TritonImplementation):
    op = "softmax"
    config_space = {"BLOCK": [1024, 2048, 4096, 8192, 16384], "num_warps": [4, 8, 16],
                    "num_stages": [1, 2, 3]}
    default_config = {"BLOCK": 8192, "num_warps": 8, "num_stages": 2}

    def _launch(self, x2d: torch.Tensor, y2d: torch.Tensor, config: dict) -> None:
        rows, cols = x2d.shape
        block, stride = config["BLOCK"], x2d.stride(0)
        options = {"num_warps": config["num_warps"], "num_stages": config["num_stages"]}
        cols_pow2 = next_power_of_2(cols)
        in_flight = programs_in_flight(x2d.device)
        if cols_pow2 <= block:
            # as many whole rows as BLOCK holds, but no fewer programs than the GPU runs at once
            # where the rows allow (8192 x 128: 16 rows each, 512 programs, not 64 rows, 128)
            rows_per_program = min(block // cols_pow2, next_power_of_2(cdiv(rows, in_flight)))
            grid = (cdiv(rows, rows_per_program),)
            launcher(_softmax_rows_kernel)[grid](x2d, y2d, rows, cols, stride, ROWS=rows_per_program,
                                                 COLS=cols_pow2, **options)
            return
        # split rows into chunks of whole blocks until the GPU has enough programs
        blocks = cdiv(cols, block)
        chunks = min(blocks, cdiv(in_flight, rows))
        if chunks == 1:
            launcher(_softmax_looped_kernel)[(rows,)](x2d, y2d, cols, stride, BLOCK=block, **options)
            return
        chunk_len = cdiv(blocks, chunks) * block
        chunks = cdiv(cols, chunk_len)
        stats = torch.empty((rows, chunks, 2), dtype=torch.float32, device=x2d.device)  # (max, sum)
        grid = (rows, chunks)
        launcher(_softmax_chunk_stats_kernel)[grid](x2d, stats, cols, stride, chunk_len, chunks, BLOCK=block,
                                                    **options)
        launcher(_softmax_chunk_write_kernel)[grid](x2d, y2d, stats, cols, stride, chunk_len, chunks,
                                                    CHUNKS=next_power_of_2(chunks), BLOCK=block, **options)
