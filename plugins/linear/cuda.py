"""linear in raw CUDA: the shared GEMM core (gemm.cuh) with the bias fused into the epilogue.

fp16 / bf16 run on tensor cores (mma.sync m16n8k16 fed by ldmatrix), float32 on a register-tiled SIMT
kernel; both are cp.async pipelines over BK-deep tiles in grouped block order. Each op has an aligned
entry point (16-byte cp.async; needs K and N multiples of 16 bytes) and a guarded one (any shape).
GemmCudaImplementation is the base of every cuda plugin on that core (linear, linear_backward, conv2d,
conv2d_backward): config space, launch shape and the checks a config must pass for a call.
"""

from __future__ import annotations

from typing import Any

import torch

from kernelzoo.backends.cuda import CudaImplementation
from kernelzoo.errors import UnsupportedError
from kernelzoo.registry import Call

from . import rows

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


class LinearCuda(GemmCudaImplementation):
    op = "linear"

    def run(self, call: Call, config: dict) -> torch.Tensor:
        x, w, bias = call.inputs["x"], call.inputs["weight"], call.inputs.get("bias")
        out = call.empty((*x.shape[:-1], w.shape[0]))
        if out.numel() == 0:
            return out
        x2, w = rows(x).contiguous(), w.contiguous()
        bias = bias.contiguous() if bias is not None else None
        (m, k), n = x2.shape, w.shape[0]
        vec = self.vec(call.dtype)
        name = "linear_aligned" if k % vec == 0 and n % vec == 0 and aligned(x2, w) else "linear_guarded"
        self.launch_gemm(call, name, config, True, True, (x2, w, bias, out, m, n, k), self.tiles(m, n, config))
        return out
