"""The GEMM family's CUDA base: every cuda plugin whose source includes gemm.cuh (linear, linear_backward,
conv2d, conv2d_backward) shares its config space, launch shape and the checks a config must pass for a call."""

from __future__ import annotations

from typing import Any

import torch

from kernelzoo.backends.cuda import I64, CudaImplementation
from kernelzoo.errors import UnsupportedError
from kernelzoo.registry import Call

DEFAULT_SHARED_OPTIN = 227 * 1024  # H100; the device's own figure is used where torch reports it
MAX_GRID_Z = 65535


def aligned(*tensors: torch.Tensor) -> bool:
    """Whether every tensor starts 16-byte aligned (the cp.async chunks' requirement)."""
    return all(t.data_ptr() % 16 == 0 for t in tensors)


class GemmCudaImplementation(CudaImplementation):
    """A cuda plugin whose source includes gemm.cuh."""

    # Block tile BM×BN×BK, warp tile WM×WN (tensor cores), STAGES tiles in flight. Threads: 32 per warp
    # of the (BM/WM)×(BN/WN) warp grid for fp16/bf16, (BM/8)·(BN/8) for float32. A config whose shared
    # memory or threads a call's dtype cannot have is rejected for that call.
    config_space = {"BM": [64, 128], "BN": [64, 128, 256], "BK": [32, 64], "WM": [32, 64], "WN": [64],
                    "STAGES": [3, 4]}
    # 8 warps of 64×64 (as matmul's): 104 KiB of shared memory at fp16; 512 threads, 196 KiB at float32
    default_config = {"BM": 128, "BN": 256, "BK": 32, "WM": 64, "WN": 64, "STAGES": 4}

    def defines(self, dtype: torch.dtype, config: Any) -> dict[str, int | float | str]:
        return {**super().defines(dtype, config), "KZ_TENSOR_CORES": int(dtype != torch.float32)}

    @staticmethod
    def vec(dtype: torch.dtype) -> int:
        """Elements per 16-byte chunk: 8 at fp16/bf16, 4 at float32."""
        return 16 // dtype.itemsize

    def launch_shape(self, dtype: torch.dtype, config: dict, a_gk: bool, b_gk: bool) -> tuple[int, int]:
        """(threads per block, dynamic shared-memory bytes) of ``config`` for ``dtype`` and operand layouts
        (a_gk / b_gk: the operand is contiguous along the reduction in global memory)."""
        bm, bn, bk, stages = config["BM"], config["BN"], config["BK"], config["STAGES"]
        if dtype == torch.float32:  # both tiles k-major, rows padded by 4 floats
            return (bm // 8) * (bn // 8), stages * bk * (bm + 4 + bn + 4) * 4
        if bm % config["WM"] or bn % config["WN"]:
            raise UnsupportedError(f"{self.key}: warp tile {config['WM']}×{config['WN']} does not divide block "
                                   f"tile {bm}×{bn}")
        a = bm * (bk + 8) if a_gk else bk * (bm + 8)
        b = bn * (bk + 8) if b_gk else bk * (bn + 8)
        return 32 * (bm // config["WM"]) * (bn // config["WN"]), stages * (a + b) * 2

    def launch_gemm(self, call: Call, name: str, config: dict, a_gk: bool, b_gk: bool, args: tuple,
                    tiles: int, batch: int = 1) -> None:
        """Launch GEMM kernel ``name`` over ``tiles`` output tiles × ``batch``, once the config fits."""
        threads, shared = self.launch_shape(call.dtype, config, a_gk, b_gk)
        kernel = self.kernel(name, call.dtype, config)
        props = torch.cuda.get_device_properties(call.device)
        limit = getattr(props, "shared_memory_per_block_optin", DEFAULT_SHARED_OPTIN)
        if shared > limit:
            raise UnsupportedError(f"{self.key}: {config} needs {shared} bytes of shared memory for {call.dtype}; "
                                   f"a block has {limit}")
        most = kernel.attributes()["max_threads_per_block"]  # what its register use leaves
        if threads > most:
            raise UnsupportedError(f"{self.key}: {config} needs {threads} threads for {call.dtype}; its register "
                                   f"use allows {most}")
        if batch > MAX_GRID_Z:
            raise UnsupportedError(f"{self.key}: batch {batch} exceeds the grid's {MAX_GRID_Z} on axis z")
        kernel(*args, grid=(tiles, 1, batch), block=threads, shared_mem=shared)

    @staticmethod
    def tiles(m: int, n: int, config: dict) -> int:
        return -(-m // config["BM"]) * -(-n // config["BN"])


ROWS_PER_SPLIT = 256  # rows one column_sums block adds: M = 8192 gives 32 splits × N/32 column blocks


def column_sums(impl: GemmCudaImplementation, call: Call, config: dict, x: torch.Tensor, ld: int, rows: int,
                cols: int, out: torch.Tensor) -> None:
    """out[j] = Σ_i x[i·ld + j] for j < cols, through the column_sums kernels of ``impl``'s source."""
    splits = max(1, -(-rows // ROWS_PER_SPLIT))
    partial = torch.empty((splits, cols), dtype=torch.float32, device=x.device)
    impl.kernel("column_sums", call.dtype, config)(x, partial, rows, cols, I64(ld), ROWS_PER_SPLIT,
                                                   grid=(-(-cols // 32), splits), block=(32, 8))
    impl.kernel("column_sums_finish", call.dtype, config)(partial, out, splits, cols, grid=-(-cols // 256),
                                                          block=256)
