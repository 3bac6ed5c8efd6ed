"""matmul in raw CUDA: mma.sync tensor cores for fp16/bf16, a register-tiled SIMT kernel for float32.

Both are cp.async pipelines over BK-deep tiles (STAGES in flight) with grouped block order; see cuda.cu.
Each has an aligned entry point (16-byte cp.async) and a guarded one (any size, any pointer). WGMMA 1 is
Hopper's kernel (sm_90, compiled for sm_90a; fp16/bf16 with 16-byte aligned rows): warpgroup MMAs fed by a
producer warpgroup's TMA copies through an mbarrier ring, on a persistent grid (../_gemm/hopper.cuh).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch

from kernelzoo.backends.cuda import I64, CudaImplementation, Kernel, tensor_map, tensor_map_launch
from kernelzoo.errors import UnsupportedError
from kernelzoo.registry import Call

from . import batched, output_shape

MAX_GRID_Z = 65535
SIMT_TILE = 8  # TM = TN in cuda.cu: each float32 thread computes 8×8 outputs
DEFAULT_SHARED_OPTIN = 227 * 1024  # H100; the device's own figure is used where torch reports it
WGMMA_ACCUMULATORS = 128  # per consumer thread: 128 of them and their addressing fit the 232 registers it gets
WGMMA_DEFAULTS = {"BK": 64, "WM": 64, "WN": 64}  # the mma.sync entries the Hopper kernel does not read


class MatmulCuda(CudaImplementation):
    op = "matmul"
    # Block tile BM×BN×BK, warp tile WM×WN (tensor cores), STAGES tiles in flight. Threads: 32 per warp
    # of the (BM/WM)×(BN/WN) warp grid for fp16/bf16, (BM/8)·(BN/8) for float32. Shared memory:
    # STAGES·(BM·(BK+8) + BK·(BN+8))·2 bytes (fp16/bf16), STAGES·BK·(BM+4+BN)·4 (float32); a config
    # that does not fit a call's dtype, or needs more registers than a block has, is rejected.
    # WGMMA 1 (sm_90, fp16/bf16, 16-byte aligned rows): the Hopper kernel, BK 64 (one 128-byte swizzled line),
    # CONSUMERS warpgroups of BM/CONSUMERS rows (whole m64 blocks, up to 128 accumulators a thread) and a producer
    # warpgroup; TMA_STORE 1 stores C through shared memory by TMA instead of from registers. Shared memory:
    # 1024 + STAGES·(BM + BN)·128 + TMA_STORE·CONSUMERS·16384 + 16·STAGES bytes. It reads neither WM nor WN, and
    # the mma.sync kernels neither CONSUMERS nor TMA_STORE: points that differ only there are rejected, not run
    # twice.
    config_space = {"BM": [64, 128, 256], "BN": [64, 128, 256], "BK": [32, 64], "WM": [32, 64],
                    "WN": [64], "STAGES": [3, 4, 5], "WGMMA": [0, 1], "CONSUMERS": [1, 2], "TMA_STORE": [0, 1]}
    # 8 warps of 64×64: 106 KiB of shared memory at fp16, 194 KiB at float32 (512 threads)
    default_config = {"BM": 128, "BN": 256, "BK": 32, "WM": 64, "WN": 64, "STAGES": 4, "WGMMA": 0, "CONSUMERS": 1,
                      "TMA_STORE": 0}
    # The Hopper kernel's tiles of CUTLASS's and FlashAttention-3's sm90 GEMMs: 128×256 and 256×128 over two
    # consumers, 128×128 over one, with either epilogue; not yet timed against each other.
    tuning_seeds = ({"WGMMA": 1, "BM": 128, "BN": 256, "BK": 64, "STAGES": 4, "CONSUMERS": 2, "TMA_STORE": 1},
                    {"WGMMA": 1, "BM": 128, "BN": 256, "BK": 64, "STAGES": 4, "CONSUMERS": 2},
                    {"WGMMA": 1, "BM": 256, "BN": 128, "BK": 64, "STAGES": 4, "CONSUMERS": 2, "TMA_STORE": 1},
                    {"WGMMA": 1, "BM": 256, "BN": 128, "BK": 64, "STAGES": 4, "CONSUMERS": 2},
                    {"WGMMA": 1, "BM": 128, "BN": 128, "BK": 64, "STAGES": 5, "CONSUMERS": 1, "TMA_STORE": 1},
                    {"WGMMA": 1, "BM": 128, "BN": 128, "BK": 64, "STAGES": 5, "CONSUMERS": 2})

    def __init__(self) -> None:
        self._max_threads: dict[Kernel, int] = {}

    def defines(self, dtype: torch.dtype, config: Any) -> dict[str, int | float | str]:
        return {**super().defines(dtype, config), "KZ_TENSOR_CORES": int(dtype != torch.float32)}

    def target(self, config: Mapping[str, Any], arch: str) -> str:
        """sm_90a for the Hopper kernel (wgmma, setmaxnreg), else the device's arch."""
        return "sm_90a" if config.get("WGMMA") else arch

    def run(self, call: Call, config: dict) -> torch.Tensor:
        if config.get("WGMMA"):
            return self.run_wgmma(call, config)
        if config.get("CONSUMERS", 1) != 1 or config.get("TMA_STORE", 0):
            raise UnsupportedError(f"matmul/cuda: CONSUMERS and TMA_STORE are the Hopper kernel's (WGMMA 1): {config}")
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

    @staticmethod
    def wgmma_shape(config: Mapping[str, Any]) -> tuple[int, int]:
        """(threads per block, dynamic shared-memory bytes) of a WGMMA config; UnsupportedError where the kernel
        cannot take it: entries it does not read away from their defaults, a consumer's rows not whole m64 blocks,
        more accumulators than a thread's registers hold."""
        bm, bn, consumers = config["BM"], config["BN"], config["CONSUMERS"]
        for name, value in WGMMA_DEFAULTS.items():
            if config[name] != value:
                raise UnsupportedError(f"matmul/cuda: WGMMA runs {name} {value} only, not {config}")
        rows = bm // consumers
        if rows % 64 or bm % consumers:
            raise UnsupportedError(f"matmul/cuda: WGMMA gives each of {consumers} consumer warpgroups "
                                   f"{bm / consumers:g} rows; a warpgroup takes whole m64 blocks: {config}")
        accumulators = rows // 64 * bn // 2
        if accumulators > WGMMA_ACCUMULATORS:
            raise UnsupportedError(f"matmul/cuda: {config} gives a consumer thread {accumulators} accumulators; "
                                   f"{WGMMA_ACCUMULATORS} fit its registers")
        staging = config["TMA_STORE"] * consumers * 2 * 64 * 64 * 2  # two 64×64 tiles a consumer
        return 128 * (consumers + 1), 1024 + config["STAGES"] * (bm + bn) * 128 + staging + 16 * config["STAGES"]

    @staticmethod
    def wgmma_unsupported(call: Call) -> str | None:
        """Why the Hopper kernel cannot run ``call`` (its dtype, rows, device), or None."""
        a, b = call.inputs["a"], call.inputs["b"]
        if call.dtype not in (torch.float16, torch.bfloat16):
            return f"WGMMA takes float16 and bfloat16, not {call.dtype}"
        if a.shape[-1] % 8 or b.shape[-1] % 8:
            return (f"WGMMA reads rows by TMA, which needs 16-byte aligned rows: K = {a.shape[-1]} and "
                    f"N = {b.shape[-1]} must be multiples of 8")
        if call.device.type == "cuda":
            if torch.cuda.get_device_capability(call.device) != (9, 0):
                return "WGMMA runs on sm_90 (Hopper) devices only"
            ok, reason = tensor_map_launch()
            if not ok:
                return f"WGMMA takes tensor maps, and {reason}"
        return None

    def run_wgmma(self, call: Call, config: Mapping[str, Any]) -> torch.Tensor:
        why = self.wgmma_unsupported(call)
        if why:
            raise UnsupportedError(f"matmul/cuda: {why}")
        threads, shared = self.wgmma_shape(config)
        props = torch.cuda.get_device_properties(call.device)
        limit = getattr(props, "shared_memory_per_block_optin", DEFAULT_SHARED_OPTIN)
        if shared > limit:
            raise UnsupportedError(f"matmul/cuda: {config} needs {shared} bytes of shared memory; a block has {limit}")
        a3, b3, batch = batched(call)
        out = call.empty(output_shape(call))
        if out.numel() == 0:
            return out
        # rows contiguous and 16-byte aligned, as the tensor maps read them
        a3, b3 = (t if t.is_contiguous() and t.data_ptr() % 16 == 0 else t.clone(memory_format=torch.contiguous_format)
                  for t in (a3, b3))
        (_, m, k), n = a3.shape, b3.shape[-1]
        if k == 0:  # a tensor map has no empty dims
            return out.zero_()
        kernel = self.kernel("matmul_wgmma", call.dtype, config)
        tiles = batch * -(-m // config["BM"]) * -(-n // config["BN"])
        c_map = (tensor_map(out.view(batch, m, n), (64, 64, 1)),) if config["TMA_STORE"] else ()
        kernel(tensor_map(a3, (64, config["BM"], 1)), tensor_map(b3, (64, 64, 1)), out, m, n, k, batch,
               int(a3.shape[0] > 1), int(b3.shape[0] > 1), *c_map, grid=min(tiles, props.multi_processor_count),
               block=threads, shared_mem=shared)
        return out
