"""What the row kernels' cuda plugins share: the row size they take, the device queries of their launch shapes,
the cluster a long row is split over, and whether 16-byte accesses fit a call."""

from __future__ import annotations

import functools

import torch

MAX_COLS = 1 << 30  # element offsets within a row are 32-bit, with a tile of headroom
RESIDENT_THREADS_PER_SM = 2048  # what a full SM holds on sm_80 and sm_90


def too_large(rows: int, cols: int) -> str | None:
    """Why a (rows, cols) call is past the kernels' indexing, or None."""
    if cols > MAX_COLS or rows >= 1 << 31:
        return f"takes rows of up to {MAX_COLS} elements and fewer than 2^31 rows, not {rows} x {cols}"
    return None


@functools.cache
def has_clusters(device: torch.device) -> bool:
    """Whether the GPU runs thread-block clusters (sm_90 on): the cluster kernels exist only there."""
    return torch.cuda.get_device_capability(device) >= (9, 0)


@functools.cache
def sm_count(device: torch.device) -> int:
    return torch.cuda.get_device_properties(device).multi_processor_count


def row_cluster(n: int, per_block: int, most: int, device: torch.device) -> int:
    """The blocks of a cluster that holds a row of n at per_block elements a block: the fewest, a power of two
    (blocks beyond the row's end would only wait at its barriers, which costs most of the speed). 0 where more
    than ``most`` would be needed or the GPU runs no clusters."""
    if n > per_block * most or not has_clusters(device):
        return 0
    return 1 << max(0, (n - 1) // per_block).bit_length()


def vector_ok(pack: int, n: int, row_strides: tuple[int, ...], rows: int, *tensors: torch.Tensor | None) -> bool:
    """Whether 16-byte accesses of ``pack`` elements fit: n and every row stride multiples of it (a single
    row needs no stride), every pointer 16-byte aligned."""
    return pack > 1 and n % pack == 0 and all(s % pack == 0 or rows == 1 for s in row_strides) and all(
        t.data_ptr() % 16 == 0 for t in tensors if t is not None)
