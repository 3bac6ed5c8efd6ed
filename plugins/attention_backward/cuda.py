"""The attention backward in raw CUDA: FlashAttention-2's backward on tensor cores (cuda.cu, on
../_cuda/flash.cuh), three kernels: delta = rowsum(dO∘O); dK and dV per block of BLOCK_OUTER keys, looping
over the query tiles (BLOCK_INNER rows) of every head of its GQA group; dQ per block of BLOCK_OUTER query rows,
looping over key tiles of BLOCK_INNER (a separate pass rather than atomics: cuda.cu says why). P is recomputed
from the forward's lse. Same dtypes, head dims, masks and layouts as the forward's cuda plugin.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch

from kernelzoo.backends.cuda import CudaImplementation
from kernelzoo.registry import Call

from ..attention.cuda import (
    LOG2E,
    STATE_REGISTERS,
    aligned_rows,
    call_defines,
    check_fit,
    kernel_head_dim,
    mask_args,
    row_tiles,
    strides,
    unsupported,
)
from . import gradients_like, trivial_backward

DELTA_ROWS = 32  # rows per block of the delta kernel (256 threads, 8 a row)


class AttentionBackwardCuda(CudaImplementation):
    op = "attention_backward"
    dtypes = {"cuda": (torch.float16, torch.bfloat16)}
    # BLOCK_OUTER: the keys (dK/dV pass) or query rows (dQ pass) a block owns, over WARPS warps of 16 or 32;
    # BLOCK_INNER: the step of its loop; STAGES steps in flight. 16 points; for a call, those whose tile state
    # overflows the registers (STATE_REGISTERS) or whose tiles overflow shared memory are rejected.
    config_space = {"BLOCK_OUTER": [64, 128], "BLOCK_INNER": [32, 64], "WARPS": [4, 8], "STAGES": [2, 3]}
    # 8 warps of 16 rows: at head dim 128 the dK/dV pass takes 230-236 registers and 102.5 KiB, the dQ pass
    # 160 and 102 KiB (no spill); valid for every head dim up to 128.
    default_config = {"BLOCK_OUTER": 128, "BLOCK_INNER": 32, "WARPS": 8, "STAGES": 2}

    def supports(self, call: Call) -> str | None:
        return super().supports(call) or unsupported(call)

    def shared_memory(self, call: Call, config: Mapping[str, Any]) -> dict[str, int]:
        """Dynamic shared-memory bytes per kernel of ``config`` for ``call``, once the config fits the call."""
        hd, outer, inner = kernel_head_dim(call.inputs["q"].shape[3]), config["BLOCK_OUTER"], config["BLOCK_INNER"]
        # k and v (dK/dV) or q and dO (dQ) tiles of outer rows, STAGES × two tiles of inner rows, rows of hd + 8;
        # the dK/dV pass adds lse and delta for STAGES × inner rows
        tiles = 2 * (hd + 8) * (2 * outer + 2 * config["STAGES"] * inner)
        dkdv = tiles + 8 * config["STAGES"] * inner
        mt = row_tiles(self.key, config, outer, config["WARPS"])
        state = mt * (hd + inner)  # dK/dV pass: dK, dV mt·hd/2 each, Pᵀ and dSᵀ mt·inner/2 each (dQ: less)
        check_fit(self.key, config, call, state, STATE_REGISTERS["backward"], dkdv)
        return {"attention_backward_delta": 0, "attention_backward_dkdv": dkdv, "attention_backward_dq": tiles}

    def run(self, call: Call, config: dict) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        trivial = trivial_backward(call)
        if trivial is not None:
            return trivial
        shared = self.shared_memory(call, config)
        q, k, v, o, do = (aligned_rows(call.inputs[name]) for name in ("q", "k", "v", "o", "do"))
        lse = call.inputs["lse"].contiguous()
        (batch, heads, n_q, d), (_, kv_heads, n_k, _) = q.shape, k.shape
        dq, dk, dv = gradients_like(call)
        delta = torch.empty((batch, heads, n_q), dtype=torch.float32, device=q.device)
        mask, mask_strides, _ = mask_args(call)
        defines = call_defines(call, config)
        scale = call.params["scale"]
        outer, group, threads = config["BLOCK_OUTER"], heads // kv_heads, 32 * config["WARPS"]

        self.kernel("attention_backward_delta", q.dtype, defines)(
            o, do, delta, *strides(o), *strides(do), heads, n_q, d,
            grid=(-(-n_q // DELTA_ROWS), batch * heads), block=256)
        self.kernel("attention_backward_dkdv", q.dtype, defines)(
            q, k, v, mask, do, lse, delta, dk, dv, *strides(q), *strides(k), *strides(v), *strides(do),
            *strides(dk), *strides(dv), *mask_strides, heads, kv_heads, group, n_q, n_k, d, scale * LOG2E, scale,
            grid=(-(-n_k // outer), batch * kv_heads), block=threads, shared_mem=shared["attention_backward_dkdv"])
        self.kernel("attention_backward_dq", q.dtype, defines)(
            q, k, v, mask, do, lse, delta, dq, *strides(q), *strides(k), *strides(v), *strides(do), *strides(dq),
            *mask_strides, heads, group, n_q, n_k, d, scale * LOG2E, scale,
            grid=(-(-n_q // outer), batch * heads), block=threads, shared_mem=shared["attention_backward_dq"])
        return dq, dk, dv
