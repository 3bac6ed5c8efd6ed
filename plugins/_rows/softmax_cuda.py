"""What softmax's and softmax_backward's cuda plugins share: their base, and how a row too long for one block is
split into chunks."""

from __future__ import annotations

import torch
from kernelzoo_plugins._rows.cuda import RESIDENT_THREADS_PER_SM, sm_count, too_large
from kernelzoo_plugins._rows.softmax import RowKernels

from kernelzoo.errors import UnsupportedError
from kernelzoo.registry import Call


def chunks_of(rows: int, cols: int, threads: int, items: int, device: torch.device) -> tuple[int, int]:
    """(chunk_len, chunks) of rows too long for a block of THREADS threads of ITEMS elements: one chunk (looped
    kernels) when the rows alone give the GPU enough blocks, else chunks of whole tiles (tile boundaries keep
    16-byte alignment) until they do."""
    tile = threads * items
    tiles = (cols + tile - 1) // tile
    in_flight = sm_count(device) * max(1, RESIDENT_THREADS_PER_SM // threads)
    chunks = min(tiles, (in_flight + rows - 1) // rows)
    if chunks == 1:
        return cols, 1
    chunk_len = (tiles + chunks - 1) // chunks * tile
    return chunk_len, (cols + chunk_len - 1) // chunk_len


class SoftmaxRowsCuda(RowKernels):
    """:class:`RowKernels` whose kernels index rows of at most ``MAX_COLS`` elements, fewer than 2^31 of them:
    a larger call is not supported."""

    def supports(self, call: Call) -> str | None:
        sizes = call.op.sizes(call)
        return super().supports(call) or too_large(sizes["rows"], sizes["cols"])

    def check_rows(self, rows: int, cols: int) -> None:
        if why := too_large(rows, cols):
            raise UnsupportedError(f"{self.key} {why}")
