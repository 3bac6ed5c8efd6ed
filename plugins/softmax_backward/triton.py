"""softmax's gradient in Triton, dx = y · (grad − Σ grad·y) per row, with softmax's three paths chosen by the
row length against BLOCK (the elements of each of grad and y a program holds at once):

* rows that fit (next power of two of cols <= BLOCK): one load of grad and y per program of BLOCK // COLS
  whole rows, so each is read once and dx written once;
* long rows, many of them: one program per row loops over it twice, the dot product then dx; the second
  read mostly hits L2 (the row was just read);
* long rows, fewer than the GPU has programs in flight: each row is split into chunks, one kernel writes
  each chunk's dot product, a second adds a row's partials (in a fixed order) and writes its chunk.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl
from kernelzoo_plugins._rows.softmax import RowKernels
from kernelzoo_plugins._rows.triton import programs_in_flight

from kernelzoo.backends.triton import TritonImplementation, cdiv, launcher, next_power_of_2


@triton.jit
def _rows_kernel(g_ptr, y_ptr, dx_ptr, rows, cols, g_row_stride, y_row_stride,
                 ROWS: tl.constexpr, COLS: tl.constexpr):
    row = tl.program_id(0).to(tl.int64) * ROWS + tl.arange(0, ROWS)[:, None]  # (ROWS, 1)
    col = tl.arange(0, COLS)[None, :]  # (1, COLS)
    mask = (row < rows) & (col < cols)
    g = tl.load(g_ptr + row * g_row_stride + col, mask=mask, other=0.0).to(tl.float32)
    y = tl.load(y_ptr + row * y_row_stride + col, mask=mask, other=0.0).to(tl.float32)
    s = tl.sum(g * y, axis=1)[:, None]  # padding adds 0 · 0
    tl.store(dx_ptr + row * cols + col, (y * (g - s)).to(dx_ptr.dtype.element_ty), mask=mask)


@triton.jit
def _dot(g_row, y_row, lo, hi, BLOCK: tl.constexpr):
    """Σ g·y over [lo, hi) of one row: a float32 lane each, folded once at the end."""
    acc = tl.zeros([BLOCK], tl.float32)
    for start in range(lo, hi, BLOCK):
        offsets = start + tl.arange(0, BLOCK)
        mask = offsets < hi
        g = tl.load(g_row + offsets, mask=mask, other=0.0).to(tl.float32)
        y = tl.load(y_row + offsets, mask=mask, other=0.0).to(tl.float32)
        acc += g * y
    return tl.sum(acc, axis=0)


@triton.jit
def _write_dx(g_row, y_row, dx_row, lo, hi, s, BLOCK: tl.constexpr):
    for start in range(lo, hi, BLOCK):
        offsets = start + tl.arange(0, BLOCK)
        mask = offsets < hi
        g = tl.load(g_row + offsets, mask=mask, other=0.0).to(tl.float32)
        y = tl.load(y_row + offsets, mask=mask, other=0.0).to(tl.float32)
        tl.store(dx_row + offsets, (y * (g - s)).to(dx_row.dtype.element_ty), mask=mask)


@triton.jit
def _looped_kernel(g_ptr, y_ptr, dx_ptr, cols, g_row_stride, y_row_stride, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    g_row, y_row = g_ptr + row * g_row_stride, y_ptr + row * y_row_stride
    s = _dot(g_row, y_row, 0, cols, BLOCK)
    _write_dx(g_row, y_row, dx_ptr + row * cols, 0, cols, s, BLOCK)


@triton.jit
def _chunk_dot_kernel(g_ptr, y_ptr, dots_ptr, cols, g_row_stride, y_row_stride, chunk_len, chunks,
                      BLOCK: tl.constexpr):
    row, chunk = tl.program_id(0).to(tl.int64), tl.program_id(1)
    lo = chunk * chunk_len
    s = _dot(g_ptr + row * g_row_stride, y_ptr + row * y_row_stride, lo, tl.minimum(lo + chunk_len, cols), BLOCK)
    tl.store(dots_ptr + row * chunks + chunk, s)


@triton.jit
def _chunk_write_kernel(g_ptr, y_ptr, dx_ptr, dots_ptr, cols, g_row_stride, y_row_stride, chunk_len, chunks,
                        CHUNKS: tl.constexpr, BLOCK: tl.constexpr):
    row, chunk = tl.program_id(0).to(tl.int64), tl.program_id(1)
    i = tl.arange(0, CHUNKS)
    s = tl.sum(tl.load(dots_ptr + row * chunks + i, mask=i < chunks, other=0.0), axis=0)
    lo = chunk * chunk_len
    _write_dx(g_ptr + row * g_row_stride, y_ptr + row * y_row_stride, dx_ptr + row * cols, lo,
              tl.minimum(lo + chunk_len, cols), s, BLOCK)


class SoftmaxBackwardTriton(RowKernels, TritonImplementation):
    op = "softmax_backward"
    row_inputs = ("grad", "y")
    # BLOCK holds that many elements of grad and of y: half softmax's largest, for the same registers
    config_space = {"BLOCK": [1024, 2048, 4096, 8192], "num_warps": [4, 8, 16], "num_stages": [1, 2, 3]}
    default_config = {"BLOCK": 4096, "num_warps": 8, "num_stages": 2}

    def _launch(self, g2d: torch.Tensor, y2d: torch.Tensor, dx2d: torch.Tensor, config: dict) -> None:
        rows, cols = y2d.shape
        block, strides = config["BLOCK"], (g2d.stride(0), y2d.stride(0))
        options = {"num_warps": config["num_warps"], "num_stages": config["num_stages"]}
        cols_pow2 = next_power_of_2(cols)
        in_flight = programs_in_flight(y2d.device)
        if cols_pow2 <= block:
            # as many whole rows as BLOCK holds, but no fewer programs than the GPU runs at once where the
            # rows allow
            rows_per_program = min(block // cols_pow2, next_power_of_2(cdiv(rows, in_flight)))
            launcher(_rows_kernel)[(cdiv(rows, rows_per_program),)](
                g2d, y2d, dx2d, rows, cols, *strides, ROWS=rows_per_program, COLS=cols_pow2, **options)
            return
        # split rows into chunks of whole blocks until the GPU has enough programs
        blocks = cdiv(cols, block)
        chunks = min(blocks, cdiv(in_flight, rows))
        if chunks == 1:
            launcher(_looped_kernel)[(rows,)](g2d, y2d, dx2d, cols, *strides, BLOCK=block, **options)
            return
        chunk_len = cdiv(blocks, chunks) * block
        chunks = cdiv(cols, chunk_len)
        dots = torch.empty((rows, chunks), dtype=torch.float32, device=y2d.device)
        grid = (rows, chunks)
        launcher(_chunk_dot_kernel)[grid](g2d, y2d, dots, cols, *strides, chunk_len, chunks, BLOCK=block, **options)
        launcher(_chunk_write_kernel)[grid](g2d, y2d, dx2d, dots, cols, *strides, chunk_len, chunks,
                                            CHUNKS=next_power_of_2(chunks), BLOCK=block, **options)
