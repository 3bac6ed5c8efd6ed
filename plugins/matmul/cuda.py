"""matmul in raw CUDA: mma.sync tensor cores for fp16/bf16, a register-tiled SIMT kernel for float32.

Both are cp.async pipelines over BK-deep tiles (STAGES in flight) with grouped block order; see cuda.cu.
Each has an aligned entry point (16-byte cp.async) and a guarded one (any size, any pointer).
"""

from __future__ import annotations

from typing import Any

import torch

from kernelzoo.backends.cuda import I64, CudaImplementation, Kernel
from kernelzoo.errors import UnsupportedError
from kernelzoo.registry import Call

from . import batched, output_shape

MAX_GRID_Z = 65535
SIMT_TILE = 8  # TM = TN in cuda.cu: each float32 thread computes 8×8 outputs
DEFAULT_SHARED_OPTIN = 227 * 1024  # H100; the device's own figure is used where torch reports it


class MatmulCuda(CudaImplementation):
    op = "matmul"
    # Block tile BM×BN×BK, warp tile WM×WN (tensor cores), STAGES tiles in flight. Threads: 32 per warp
    # of the (BM/WM)×(BN/WN) warp grid for fp16/bf16, (BM/8)·(BN/8) for float32. Shared memory:
    # STAGES·(BM·(BK+8) + BK·(BN+8))·2 bytes (fp16/bf16), STAGES·BK·(BM+4+BN)·4 (float32); a config
    # that does not fit a call's dtype, or needs more registers than a block has, is rejected.
    config_space = {"BM": [64, 128, 256], "BN": [64, 128, 256], "BK": [32, 64], "WM": [32, 64],
                    "WN": [64], "STAGES": [3, 4]}
    # 8 warps of 64×64: 106 KiB of shared memory at fp16, 194 KiB at float32 (512 threads)
    default_config = {"BM": 128, "BN": 256, "BK": 32, "WM": 64, "WN": 64, "STAGES": 4}

    def __init__(self) -> None:
        self._max_threads: dict[Kernel, int] = {}

    def defines(self, dtype: torch.dtype, config: Any) -> dict[str, int | float | str]:
        return {**super().defines(dtype, config), "KZ_TENSOR_CORES": int(dtype != torch.float32)}

    def run(self, call: Call, config: dict) -> torch.Tensor:
        a3, b3, batch = batched(call)
        out = call.empty(output_shape(call))
        if out.numel() == 0:
            return out
        if batch > MAX_GRID_Z:
            raise UnsupportedError(f"matmul/cuda: batch {batch} exceeds the grid's {MAX_GRID_Z} on axis z")
        a3, b3 = a3.contiguous(), b3.contiguous()
        (_, m, k), n = a3.shape, b3.shape[-1]
        threads, shared = self.launch_shape(call.dtype, config)
        props = torch.cuda.get_device_properties(call.device)
        limit = getattr(props, "shared_memory_per_block_optin", DEFAULT_SHARED_OPTIN)
        if shared > limit:
            raise UnsupportedError(f"matmul/cuda: {config} needs {shared} bytes of shared memory for "
                                   f"{call.dtype}; a block has {limit}")
        aligned = self.aligned(a3, b3, k, n)
        kernel = self.kernel("matmul_aligned" if aligned else "matmul_guarded", call.dtype, config)
        if kernel not in self._max_threads:  # what its register use leaves; asked once per kernel
            self._max_threads[kernel] = kernel.attributes()["max_threads_per_block"]
        if threads > self._max_threads[kernel]:
            raise UnsupportedError(f"matmul/cuda: {config} needs {threads} threads for {call.dtype}; its "
                                   f"register use allows {self._max_threads[kernel]}")
        tiles = -(-m // config["BM"]) * -(-n // config["BN"])
        kernel(a3, b3, out, m, n, k, I64(a3.stride(0) if a3.shape[0] > 1 else 0),
               I64(b3.stride(0) if b3.shape[0] > 1 else 0), grid=(tiles, 1, batch), block=threads,
               shared_mem=shared)
        return out

    @staticmethod
    def launch_shape(dtype: torch.dtype, config: dict) -> tuple[int, int]:
        """(threads per block, dynamic shared-memory bytes) of ``config`` for ``dtype``."""
        bm, bn, bk, stages = config["BM"], config["BN"], config["BK"], config["STAGES"]
        if dtype == torch.float32:
            threads = (bm // SIMT_TILE) * (bn // SIMT_TILE)
            return threads, stages * bk * (bm + 4 + bn) * 4
        if bm % config["WM"] or bn % config["WN"]:
            raise UnsupportedError(f"matmul/cuda: warp tile {config['WM']}×{config['WN']} does not divide "
                                   f"block tile {bm}×{bn}")
        threads = 32 * (bm // config["WM"]) * (bn // config["WN"])
        return threads, stages * (bm * (bk + 8) + bk * (bn + 8)) * 2

    @staticmethod
    def aligned(a: torch.Tensor, b: torch.Tensor, k: int, n: int) -> bool:
        """Whether the 16-byte copies may run: every row of what they read starts 16-byte aligned."""
        if a.dtype == torch.float32:  # A is copied element by element; B in 4-float chunks
            return n % 4 == 0 and b.data_ptr() % 16 == 0
        return k % 8 == 0 and n % 8 == 0 and a.data_ptr() % 16 == 0 and b.data_ptr() % 16 == 0
