"""scaled_matmul in raw CUDA on Hopper (sm_90, compiled for sm_90a): matmul's warp-specialized GEMM
(../_gemm/hopper.cuh, SCALED 1) on 8-bit float operands, with the scales, bias and output conversion in its epilogue.

A producer warpgroup brings 128-deep k-tiles of a (M×K, row-major) and of b through bᵀ (N×K, row-major: b
column-major as torch._scaled_mm takes it) by TMA into a ring of 128-byte-swizzled stages; one or two consumer
warpgroups run m64nNk32 8-bit float wgmma on them, e4m3 or e5m2 each. Hopper's tensor cores add those products in
less than float32, so every PROMOTE_K of K the kernel adds the wgmma sums into float32 ones and restarts them from
zero (as cuBLAS does by default): two sets of sums, or with OVERLAP 1 three (the wgmma sums of two intervals in
turn, so that one interval's promotion runs beside the next one's MMAs), within a consumer thread's SUMS registers.
An operand the TMA unit cannot read as it lies (a strided view, b row-major, an unaligned address) is copied
first to contiguous K-major rows (K padded up to 16 bytes, the padding unread: the TMA unit reads zeros past K).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
from kernelzoo_plugins._cuda import F8_TYPES
from kernelzoo_plugins._gemm.hopper import PersistentGrid, k_major

from kernelzoo.backends.cuda import CudaImplementation, tensor_map, tensor_map_launch
from kernelzoo.backends.cuda.compiler import dtype_define
from kernelzoo.errors import UnsupportedError
from kernelzoo.registry import FP8, Call, dtype_name, parse_dtype

from . import capability, out_dtype, rowwise

BK = 128  # a k-tile: one 128-byte swizzled line of 8-bit floats a row
SUMS = 192  # registers of sums a consumer thread holds: the sets of wgmma accumulators and the float32 totals
DEFAULT_SHARED_OPTIN = 227 * 1024  # H100, H200; the device's own figure is used where torch reports it


class ScaledMatmulCuda(PersistentGrid, CudaImplementation):
    op = "scaled_matmul"
    dtypes = {"cuda": FP8}  # a's dtype; the output's is out_dtype
    # Block tile BM×BN over CONSUMERS warpgroups of BM/CONSUMERS rows (whole m64 blocks), STAGES k-tiles in flight,
    # sums promoted every PROMOTE_K of K, OVERLAP 1 beside the next interval's MMAs; TMA_STORE 1 stores 16-bit
    # outputs through shared memory by TMA (N a multiple of 8). Threads 128·(CONSUMERS + 1); shared memory 1024 +
    # STAGES·(BM + BN)·128 + TMA_STORE·CONSUMERS·16384 + 16·STAGES bytes. A config with more sums than a thread
    # holds is rejected.
    config_space = {"BM": [64, 128, 256], "BN": [64, 128, 256], "STAGES": [3, 4, 5, 6], "CONSUMERS": [1, 2],
                    "TMA_STORE": [0, 1], "PROMOTE_K": [128, 256], "OVERLAP": [0, 1]}
    # 128×128 over two consumers (64 sums of each set a thread), six 32 KiB stages; promoted once a k-tile, beside
    # the next k-tile's MMAs
    default_config = {"BM": 128, "BN": 128, "STAGES": 6, "CONSUMERS": 2, "TMA_STORE": 0, "PROMOTE_K": 128,
                      "OVERLAP": 1}
    # other tiles the sums' registers allow, the TMA store, half as many promotions, and each promotion waited for
    # (first, what the tuner chose on the H200 at 4096³ and 8192³: the TMA store with PROMOTE_K 256 without the
    # overlap; docs/design/gemm.md)
    tuning_seeds = ({"TMA_STORE": 1, "PROMOTE_K": 256, "OVERLAP": 0}, {"TMA_STORE": 1}, {"OVERLAP": 0},
                    {"TMA_STORE": 1, "OVERLAP": 0}, {"PROMOTE_K": 256}, {"BM": 256, "BN": 64, "STAGES": 5},
                    {"BM": 128, "BN": 64, "CONSUMERS": 1}, {"BM": 64, "BN": 128, "CONSUMERS": 1})

    def defines(self, dtype: torch.dtype, config: Mapping[str, Any]) -> dict[str, int | float | str]:
        """T is the output's type (config's "out", bfloat16 unless given), A_F8 a's 8-bit float (``dtype``), B_F8
        b's (config's "b", else a's)."""
        b = parse_dtype(config["b"]) if "b" in config else dtype
        return {**{k: v for k, v in config.items() if k.isupper()},
                "T": dtype_define(parse_dtype(config.get("out", "bfloat16"))), "A_F8": F8_TYPES[dtype],
                "B_F8": F8_TYPES[b]}

    def target(self, config: Mapping[str, Any], arch: str) -> str:
        """sm_90a, whatever the device: the kernel is wgmma's (an sm_90a feature)."""
        return "sm_90a"

    def supports(self, call: Call) -> str | None:
        why = super().supports(call)
        if why is None and call.device.type == "cuda":
            if capability(call.device.index) != (9, 0):
                return "the Hopper kernel (wgmma fed by TMA) runs on sm_90 GPUs only"
            ok, reason = tensor_map_launch()
            if not ok:
                return f"the Hopper kernel takes tensor maps, and {reason}"
        return why

    @staticmethod
    def kernel_shape(config: Mapping[str, Any], out: torch.dtype = torch.bfloat16) -> tuple[int, int]:
        """(threads per block, dynamic shared-memory bytes) of ``config`` for an ``out`` output; UnsupportedError
        where the kernel cannot take it: a consumer's rows not whole m64 blocks, more sums than a thread holds,
        TMA_STORE with float32 outputs."""
        bm, bn, consumers = config["BM"], config["BN"], config["CONSUMERS"]
        rows = bm // consumers
        if rows % 64 or bm % consumers:
            raise UnsupportedError(f"scaled_matmul/cuda: {config} gives each of {consumers} consumer warpgroups "
                                   f"{bm / consumers:g} rows; a warpgroup takes whole m64 blocks")
        accumulators, sets = rows // 64 * bn // 2, 2 + config["OVERLAP"]
        if sets * accumulators > SUMS:
            raise UnsupportedError(f"scaled_matmul/cuda: {config} gives a consumer thread {accumulators} wgmma "
                                   f"accumulators a set and {sets} sets (the float32 sums included), "
                                   f"{sets * accumulators} registers; {SUMS} fit")
        if config["TMA_STORE"] and out.itemsize != 2:
            raise UnsupportedError(f"scaled_matmul/cuda: TMA_STORE stores 16-bit outputs (a 128-byte line of 64), "
                                   f"not {dtype_name(out)}: {config}")
        staging = config["TMA_STORE"] * consumers * 2 * 64 * 64 * 2  # two 64×64 tiles a consumer
        return 128 * (consumers + 1), 1024 + config["STAGES"] * (bm + bn) * BK + staging + 16 * config["STAGES"]

    def run(self, call: Call, config: dict) -> torch.Tensor:
        a, b, bias = call.inputs["a"], call.inputs["b"], call.inputs.get("bias")
        out_type = out_dtype(call)
        threads, shared = self.kernel_shape(config, out_type)
        (m, k), n = a.shape, b.shape[1]
        out = call.empty((m, n), out_type)
        if out.numel() == 0:
            return out
        if k == 0:  # a tensor map has no empty dims; the sums are zero
            return out.copy_(bias.expand(m, n)) if bias is not None else out.zero_()
        if config["TMA_STORE"] and n % 8:
            raise UnsupportedError(f"scaled_matmul/cuda: TMA_STORE writes the output's rows by TMA, which needs them "
                                   f"16-byte aligned: N = {n} is not a multiple of 8")
        props = torch.cuda.get_device_properties(call.device)
        limit = getattr(props, "shared_memory_per_block_optin", DEFAULT_SHARED_OPTIN)
        if shared > limit:
            raise UnsupportedError(f"scaled_matmul/cuda: {config} needs {shared} bytes of shared memory; a block has "
                                   f"{limit}")
        specialization = {**config, "out": dtype_name(out_type), "b": dtype_name(b.dtype),
                          "SCALE_ROWS": int(rowwise(call)), "BIAS": int(bias is not None)}
        kernel = self.kernel("scaled_matmul_wgmma", call.dtype, specialization)
        # the operands (or their copies) held until the launch: a tensor map keeps an address, not the memory, and a
        # copy freed before the launch may be handed to the next allocation (the other operand's copy)
        a_rows, b_rows = k_major(a.unsqueeze(0)), k_major(b.t().unsqueeze(0))
        a_map = tensor_map(a_rows, (BK, config["BM"], 1))
        b_map = tensor_map(b_rows, (BK, config["BN"], 1))
        c_map = (tensor_map(out.view(1, m, n), (64, 64, 1)),) if config["TMA_STORE"] else ()
        scale_a = call.inputs["scale_a"].reshape(-1).contiguous()
        scale_b = call.inputs["scale_b"].reshape(-1).contiguous()
        tiles = -(-m // config["BM"]) * -(-n // config["BN"])
        blocks = props.multi_processor_count * self.resident_blocks(kernel, threads, shared, props)
        kernel(a_map, b_map, out, m, n, k, 1, 0, 0, *c_map, scale_a, scale_b, bias, grid=min(tiles, blocks),
               block=threads, shared_mem=shared)
        return out
