"""What the row kernels' Triton plugins share: how many programs the GPU runs at once, and the tile of rows and
columns a program takes."""

from __future__ import annotations

import functools

import torch
import triton


@functools.cache
def programs_in_flight(device: torch.device) -> int:
    """About as many programs as the GPU runs at once (4 per SM); 16 under the interpreter."""
    if device.type != "cuda":
        return 16
    return 4 * torch.cuda.get_device_properties(device).multi_processor_count


def tile(rows: int, c: int, block: int, device: torch.device) -> tuple[int, int]:
    """(ROWS, COLS): COLS-wide steps over the classes, whole rows per program while BLOCK holds them, but no
    fewer programs than the GPU runs at once where the rows allow."""
    cols = min(block, triton.next_power_of_2(c))
    share = max(1, triton.cdiv(rows, programs_in_flight(device)))
    return min(block // cols, triton.next_power_of_2(share)), cols
