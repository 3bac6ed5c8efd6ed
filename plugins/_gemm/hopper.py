"""Host side of the Hopper GEMM kernel (hopper.cuh), shared by matmul's and scaled_matmul's cuda plugins: operands
laid out K-major for the TMA unit, and the size of the kernel's persistent grid."""

from __future__ import annotations

from typing import Any

import torch

from kernelzoo.backends.cuda import I64, Kernel

SM_SHARED = 228 * 1024  # shared memory an SM has (H100, H200); the device's own figure is used where torch reports it
SM_REGISTERS = 65536
BLOCK_RESERVED_SHARED = 1024  # shared memory the system keeps per block from sm_80 on


def k_major(t: torch.Tensor, transpose: Kernel | None = None) -> torch.Tensor:
    """``t`` (batch, rows, K) as the TMA unit can read it K-major: itself where its rows are contiguous, 16-byte
    aligned and 16 bytes apart (a batch of one needs no batch stride), else a copy whose rows are K elements of a
    16-byte padded line. ``transpose`` (float32: hopper.cuh's k_major_copy) makes the copy of a ``t`` whose K
    elements lie apart and whose rows lie together (a column-major A, or Bᵀ of a B whose rows the TMA unit cannot
    read) in blocks through shared memory, where an element-wise copy would read across rows. The caller holds the
    result until its launch: a tensor map keeps an address, not the memory."""
    size = t.element_size()
    strides_ok = all(s * size % 16 == 0 and s > 0 for s, n in zip(t.stride()[:-1], t.shape[:-1]) if n > 1)
    if t.stride(-1) == 1 and strides_ok and t.data_ptr() % 16 == 0:
        return t
    (batch, rows, k), pitch = t.shape, -(-t.shape[-1] * size // 16) * 16 // size
    padded = t.new_empty((batch, rows, pitch))
    if transpose is not None and t.stride(-1) != 1 and t.numel():
        transpose(t, padded, k, rows, I64(t.stride(0) if batch > 1 else 0), I64(t.stride(2)), I64(t.stride(1)),
                  I64(pitch), grid=(-(-rows // 32), -(-k // 32), batch), block=(32, 8, 1))
    else:
        padded[..., :k].copy_(t)
    return padded[..., :k]


class PersistentGrid:
    """A cuda plugin that launches the Hopper kernel: one block per SM and as many more as an SM holds."""

    def resident_blocks(self, kernel: Kernel, threads: int, shared: int, props: Any) -> int:
        """How many blocks of the persistent ``kernel`` an SM holds at once, by its shared memory and registers (the
        register count asked once per kernel, allocated 8 at a time): the grid is that many blocks an SM."""
        registers = self.__dict__.setdefault("_registers", {})
        if kernel not in registers:
            registers[kernel] = -(-kernel.attributes()["registers"] // 8) * 8
        by_shared = getattr(props, "shared_memory_per_multiprocessor", SM_SHARED) // (shared + BLOCK_RESERVED_SHARED)
        return max(1, min(by_shared, SM_REGISTERS // (registers[kernel] * threads)))
