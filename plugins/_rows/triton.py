"""What the row kernels' and the reductions' Triton plugins share: how many programs the GPU runs at once, how a
reduced dim splits into chunks when there are too few programs, and the tile of rows and columns a program
takes."""

from __future__ import annotations

import functools

import torch

from kernelzoo.backends.triton import cdiv, next_power_of_2


@functools.cache
def programs_in_flight(device: torch.device) -> int:
    """About as many programs as the GPU runs at once (4 per SM); 16 under the interpreter."""
    if device.type != "cuda":
        return 16
    return 4 * torch.cuda.get_device_properties(device).multi_processor_count


def chunking(reduced: int, step: int, programs: int, in_flight: int) -> tuple[int, int]:
    """(chunk_len, chunks): the reduced dim in whole steps, split until the GPU has enough programs."""
    steps = max(1, cdiv(reduced, step))
    chunks = min(steps, cdiv(in_flight, max(programs, 1)))
    chunk_len = cdiv(steps, chunks) * step
    return chunk_len, max(1, cdiv(reduced, chunk_len))


def tile(rows: int, c: int, block: int, device: torch.device) -> tuple[int, int]:
    """(ROWS, COLS): COLS-wide steps over the classes, whole rows per program while BLOCK holds them, but no
    fewer programs than the GPU runs at once where the rows allow."""
    cols = min(block, next_power_of_2(c))
    share = max(1, cdiv(rows, programs_in_flight(device)))
    return min(block // cols, next_power_of_2(share)), cols
