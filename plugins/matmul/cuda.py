"""matmul in raw CUDA: mma.sync tensor cores for fp16/bf16, a register-tiled SIMT kernel for float32.

Both are cp.async pipelines over BK-deep tiles (STAGES in flight) with grouped block order; see cuda.cu.
Each has an aligned entry point (16-byte cp.async) and a guarded one (any size, any pointer). WGMMA 1 is
Hopper's kernel (sm_90, compiled for sm_90a; fp16/bf16 operands with 16-byte aligned rows or columns): warpgroup
MMAs fed by a producer warpgroup's TMA copies through an mbarrier ring, on a persistent grid (../_gemm/hopper.cuh).
It also runs float32 where torch allows TF32 products (``torch.backends.cuda.matmul.allow_tf32``): TF32 wgmma,
which reads B only K-major and A K-major or from registers, so a row-major B runs as Cᵀ = Bᵀ·Aᵀ with Bᵀ from
registers and a column-major B as it lies; a B the TMA unit can read neither way, and an A it cannot read K-major,
are first copied into K-major rows.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
from kernelzoo_plugins._gemm.hopper import PersistentGrid, k_major

from kernelzoo.backends.cuda import I64, CudaImplementation, Kernel, tensor_map, tensor_map_launch
from kernelzoo.errors import UnsupportedError
from kernelzoo.registry import Call
from kernelzoo.tolerance import tf32_products

from . import batched, output_shape

MAX_GRID_Z = 65535
SIMT_TILE = 8  # TM = TN in cuda.cu: each float32 thread computes 8×8 outputs
DEFAULT_SHARED_OPTIN = 227 * 1024  # H100; the device's own figure is used where torch reports it
WGMMA_ACCUMULATORS = 128  # per consumer thread: 128 of them and their addressing fit the 232 registers it gets
WGMMA_DEFAULTS = {"BK": 64, "WM": 64, "WN": 64}  # the mma.sync entries the Hopper kernel does not read
TF32_BK = 32  # the Hopper kernel's k-tile in TF32: one 128-byte swizzled line of float32 a row


def tma_view(t: torch.Tensor) -> tuple[torch.Tensor, bool] | None:
    """(t, False) where the TMA unit can read t's rows as they lie, else (tᵀ, True) where it can read its columns
    (t's last two dims swapped): the view's last dim contiguous, its other strides (of dims longer than one) nonzero
    multiples of 16 bytes, its address 16-byte aligned. None where it can read neither."""
    if t.data_ptr() % 16:
        return None
    per_16_bytes = 16 // t.element_size()
    for view, columns in ((t, False), (t.transpose(-1, -2), True)):
        if view.stride(-1) == 1 and all(s > 0 and s % per_16_bytes == 0
                                        for s, n in zip(view.stride()[:-1], view.shape[:-1]) if n > 1):
            return view, columns
    return None


class MatmulCuda(PersistentGrid, CudaImplementation):
    op = "matmul"
    # Block tile BM×BN×BK, warp tile WM×WN (tensor cores), STAGES tiles in flight. Threads: 32 per warp
    # of the (BM/WM)×(BN/WN) warp grid for fp16/bf16, (BM/8)·(BN/8) for float32. Shared memory:
    # STAGES·(BM·(BK+8) + BK·(BN+8))·2 bytes (fp16/bf16), STAGES·BK·(BM+4+BN)·4 (float32); a config
    # that does not fit a call's dtype, or needs more registers than a block has, is rejected.
    # WGMMA 1 (sm_90, fp16/bf16, 16-byte aligned rows or columns): the Hopper kernel, BK 64 (one 128-byte swizzled
    # line), CONSUMERS warpgroups of BM/CONSUMERS rows (whole m64 blocks, up to 128 accumulators a thread) and a
    # producer warpgroup; TMA_STORE 1 stores C through shared memory by TMA instead of from registers. Shared memory:
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
    def wgmma_unsupported(call: Call, config: Mapping[str, Any] | None = None) -> str | None:
        """Why the Hopper kernel cannot run ``call`` (its dtype, operand layouts, device), with ``config`` where
        given (TMA_STORE's rows of C), or None. An operand is read as it lies where its rows or columns suit the TMA
        unit (tma_view), else from a contiguous copy, whose rows must then be 16-byte aligned."""
        a, b = call.inputs["a"], call.inputs["b"]
        if call.dtype == torch.float32:
            if not tf32_products(call.dtype, call.device):
                return "WGMMA takes float32 only in TF32, which torch.backends.cuda.matmul.allow_tf32 does not allow"
            if config is not None and config["TMA_STORE"]:
                return "TMA_STORE stores 16-bit outputs (a 128-byte line of 64), not float32"
            batch = max(t.shape[0] if t.dim() == 3 else 1 for t in (a, b))
            if batch > MAX_GRID_Z:
                return f"TF32's K-major copies take a batch of up to {MAX_GRID_Z} (one grid z each), not {batch}"
        elif call.dtype not in (torch.float16, torch.bfloat16):
            return f"WGMMA takes float16, bfloat16 and float32 (in TF32), not {call.dtype}"
        for name, t, inner in (("a", a, "K"), ("b", b, "N")):
            if call.dtype != torch.float32 and t.shape[-1] % 8 and tma_view(t) is None:
                return (f"WGMMA reads operands by TMA, which needs 16-byte aligned rows or columns: {name} of shape "
                        f"{tuple(t.shape)} and strides {t.stride()} has neither, and {inner} = {t.shape[-1]} is not "
                        "a multiple of 8")
        if config is not None and config["TMA_STORE"] and b.shape[-1] % 8:
            return f"TMA_STORE writes C's rows by TMA, which needs them 16-byte aligned: N = {b.shape[-1]} is not a " \
                   "multiple of 8"
        if call.device.type == "cuda":
            if torch.cuda.get_device_capability(call.device) != (9, 0):
                return "WGMMA runs on sm_90 (Hopper) devices only"
            ok, reason = tensor_map_launch()
            if not ok:
                return f"WGMMA takes tensor maps, and {reason}"
        return None

    def run_wgmma(self, call: Call, config: Mapping[str, Any]) -> torch.Tensor:
        why = self.wgmma_unsupported(call, config)
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
        (_, m, k), n = a3.shape, b3.shape[-1]
        if k == 0:  # a tensor map has no empty dims
            return out.zero_()
        if call.dtype == torch.float32:
            return self.run_tf32(a3, b3, out, batch, config, threads, shared, props)
        # each operand as it lies where the TMA unit can read it, else a contiguous copy (new memory: aligned)
        a_view, a_columns = tma_view(a3) or (a3.clone(memory_format=torch.contiguous_format), False)
        b_view, b_columns = tma_view(b3) or (b3.clone(memory_format=torch.contiguous_format), False)
        kernel = self.kernel("matmul_wgmma", call.dtype, {**config, "A_COL_MAJOR": int(a_columns),
                                                          "B_COL_MAJOR": int(b_columns)})
        a_map = tensor_map(a_view, (64, 64, 1) if a_columns else (64, config["BM"], 1))
        b_map = tensor_map(b_view, (64, config["BN"], 1) if b_columns else (64, 64, 1))
        c_map = (tensor_map(out.view(batch, m, n), (64, 64, 1)),) if config["TMA_STORE"] else ()
        tiles = batch * -(-m // config["BM"]) * -(-n // config["BN"])
        blocks = props.multi_processor_count * self.resident_blocks(kernel, threads, shared, props)
        kernel(a_map, b_map, out, m, n, k, batch, int(a3.shape[0] > 1), int(b3.shape[0] > 1), *c_map,
               grid=min(tiles, blocks), block=threads, shared_mem=shared)
        return out

    def run_tf32(self, a3: torch.Tensor, b3: torch.Tensor, out: torch.Tensor, batch: int, config: Mapping[str, Any],
                 threads: int, shared: int, props: Any) -> torch.Tensor:
        """The Hopper kernel in TF32 over ``batch`` products (a3 or b3 of one broadcast), 32-deep k-tiles (one
        128-byte line of float32), C stored from registers. The instruction reads B only K-major (Bᵀ's rows), and A
        either K-major by descriptor or from registers in any layout: a B whose rows the TMA unit reads as they lie
        runs as Cᵀ = Bᵀ·Aᵀ, Bᵀ the kernel's column-major A (from registers) and Aᵀ its column-major B, C stored
        transposed; any other B is read through Bᵀ's rows, K-major or a K-major copy (k_major). A is read through
        its rows, or a K-major copy of them, either way."""
        (_, m, k), n = a3.shape, b3.shape[-1]
        b_view = tma_view(b3)
        swap = b_view is not None and not b_view[1]
        specialization = {**config, "BK": TF32_BK, "TF32": 1, "A_COL_MAJOR": int(swap), "B_COL_MAJOR": 1,
                          "C_COL_MAJOR": int(swap)}
        kernel = self.kernel("matmul_wgmma", torch.float32, specialization)
        # the operands, or their copies, held until the launch: a tensor map keeps an address, not the memory
        transpose = self.kernel("k_major_copy", torch.float32, specialization)
        a_rows = k_major(a3, transpose)
        blocks = props.multi_processor_count * self.resident_blocks(kernel, threads, shared, props)
        if swap:  # the kernel's A is Bᵀ (N×K, B's rows of N as its lines), its B Aᵀ: C (M×N) is its Cᵀ
            bt_map = tensor_map(b3, (32, TF32_BK, 1))  # a box: 32 columns of B (a 128-byte line) by a k-tile
            at_map = tensor_map(a_rows, (TF32_BK, config["BN"], 1))
            tiles = batch * -(-n // config["BM"]) * -(-m // config["BN"])
            kernel(bt_map, at_map, out, n, m, k, batch, int(b3.shape[0] > 1), int(a3.shape[0] > 1),
                   grid=min(tiles, blocks), block=threads, shared_mem=shared)
            return out
        b_rows = k_major(b3.transpose(-1, -2), transpose)
        a_map = tensor_map(a_rows, (TF32_BK, config["BM"], 1))
        b_map = tensor_map(b_rows, (TF32_BK, config["BN"], 1))
        tiles = batch * -(-m // config["BM"]) * -(-n // config["BN"])
        kernel(a_map, b_map, out, m, n, k, batch, int(a3.shape[0] > 1), int(b3.shape[0] > 1), grid=min(tiles, blocks),
               block=threads, shared_mem=shared)
        return out
