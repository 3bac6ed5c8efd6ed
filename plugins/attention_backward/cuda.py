"""The attention backward in raw CUDA: FlashAttention-2's backward on tensor cores (cuda.cu, on
../_cuda/flash.cuh). delta = rowsum(dO∘O); dK and dV per block of BLOCK_OUTER keys, looping over the query tiles
(BLOCK_INNER rows) of every head of its GQA group; dQ by one of two strategies, the config's DQ (cuda.cu weighs
them): "pass", a pass of its own per block of BLOCK_OUTER query rows looping over key tiles of BLOCK_INNER
(7 matrix products per pair of tiles, deterministic), or "atomic", each dK/dV step also adding its dS·K to
float32 sums that a last kernel scales into dq (5 products, summation order unspecified). P is recomputed from
the forward's lse. Same dtypes, head dims, masks and layouts as the forward's cuda plugin. WGMMA 1 (Hopper):
the dK/dV pass with atomic dQ on warpgroup MMAs.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
from kernelzoo_plugins._flash.cuda import (
    LOG2E,
    STATE_REGISTERS,
    FlashCuda,
    aligned_rows,
    call_defines,
    check_fit,
    check_wgmma_call,
    first_fitting,
    kernel_head_dim,
    mask_args,
    plan_key,
    row_tiles,
    sm90,
    strides,
    unsupported,
)

from kernelzoo.backends.cuda import Kernel
from kernelzoo.errors import UnsupportedError
from kernelzoo.registry import Call

from . import gradients_like, trivial_backward

DELTA_ROWS = 32  # rows per block of the delta kernel (256 threads, 8 a row)
CONVERT_CHUNKS = 256  # threads per block of the convert kernel
WGMMA_ROWS = 64  # the query rows of a step of the WGMMA dK/dV pass: dq_accum's tiles


class AttentionBackwardCuda(FlashCuda):
    op = "attention_backward"
    dtypes = {"cuda": (torch.float16, torch.bfloat16)}
    # BLOCK_OUTER: the keys (dK/dV pass) or query rows (dQ pass) a block owns, over WARPS warps of 16 or 32;
    # BLOCK_INNER: the step of its loop; STAGES steps in flight; DQ: how dQ is made, "pass" (its own pass) or
    # "atomic" (by the dK/dV pass, through float32 sums). 64 points; for a call, those whose tile state overflows
    # the registers (STATE_REGISTERS) or whose tiles overflow shared memory are rejected.
    # SPLIT: the dK/dV pass's warps own 16·MT keys each (0), or pairs of them 32·MT keys, a head-dim half each (1:
    # fewer shared-memory reads a step, head dims that are multiples of 32).
    # WGMMA 1 (sm_90 devices, compiled for sm_90a): the dK/dV pass with atomic dQ on warpgroup MMAs, 64 keys a
    # warpgroup (BLOCK_OUTER = 16·WARPS) and 64-row steps, at head dims 64 and 128 (cuda.cu).
    config_space = {"BLOCK_OUTER": [64, 128], "BLOCK_INNER": [32, 64], "WARPS": [4, 8], "STAGES": [2, 3],
                    "DQ": ["pass", "atomic"], "SPLIT": [0, 1], "WGMMA": [0, 1]}
    # 8 warps of 16 rows, 64-row steps: at head dim 128 the dK/dV pass with atomic dQ takes 255 registers and
    # 157 KiB (no spill; 24 bytes with an additive attn_mask; -Xptxas -v, NVRTC 13.5, sm_90), 170-219 at 64;
    # valid for every head dim up to 128, and faster than 32-row steps (docs/design/flash-attention.md).
    # DQ "atomic": 5 products for 7. A call given it runs hopper_defaults or head_dim_defaults (below) where they
    # fit.
    default_config = {"BLOCK_OUTER": 128, "BLOCK_INNER": 64, "WARPS": 8, "STAGES": 2, "DQ": "atomic", "SPLIT": 0,
                      "WGMMA": 0}
    # The warpgroup MMAs at both widths (hopper_defaults); dQ by its own pass, so that a short search times both
    # strategies; and 4 warps of 32 rows with 32-row steps, the fastest mma.sync config at head dim 64, where its
    # tile state fits
    tuning_seeds = ({"WGMMA": 1, "STAGES": 3}, {"WGMMA": 1, "WARPS": 4, "BLOCK_OUTER": 64, "STAGES": 3},
                    {"DQ": "pass"}, {"WARPS": 4, "BLOCK_INNER": 32}, {"SPLIT": 1})
    # A call given the default runs, where it fits, what the tuner chose at every shipped key of its kernel head
    # dim: 4 warps of 32 rows with 32-row steps at 64, pairs of warps (SPLIT 1) at 128; else the default.
    head_dim_defaults = {64: {"WARPS": 4, "BLOCK_INNER": 32}, 128: {"SPLIT": 1}}
    # Before those, on an sm_90 device: the warpgroup MMAs with 3 stages, one warpgroup of 64 keys at 64, two at
    # 128, the fastest there (docs/design/flash-attention.md).
    hopper_defaults = {64: {"WGMMA": 1, "WARPS": 4, "BLOCK_OUTER": 64, "STAGES": 3}, 128: {"WGMMA": 1, "STAGES": 3}}

    def supports(self, call: Call) -> str | None:
        return super().supports(call) or unsupported(call)


    def defines(self, dtype: torch.dtype, config: Mapping[str, Any]) -> dict[str, int | float | str]:
        # DQ picks the kernels to launch, not their code: both strategies share one module
        return {k: v for k, v in super().defines(dtype, config).items() if k != "DQ"}

    def wgmma_shared_memory(self, call: Call, config: Mapping[str, Any]) -> dict[str, int]:
        """shared_memory() of a WGMMA config: 1024 bytes to align the tiles, the k and v tiles, STAGES × (q, dO)
        tiles, swizzled (no padding), a step's dSᵀ (outer keys × 64 queries), lse and delta, and a step's dQ
        (64 × hd float32)."""
        hd, outer, inner = kernel_head_dim(call.inputs["q"].shape[3]), config["BLOCK_OUTER"], config["BLOCK_INNER"]
        check_wgmma_call(self.key, call)
        if outer != 16 * config["WARPS"] or inner != 64 or config["DQ"] != "atomic" or config["SPLIT"]:
            raise UnsupportedError(f"{self.key}: WGMMA runs 64 keys a warpgroup (BLOCK_OUTER = 16·WARPS), 64-row "
                                   f"steps, atomic dQ and SPLIT 0, not {config}")
        stages = config["STAGES"]
        shared = (1024 + 2 * hd * (2 * outer + 2 * stages * inner) + 2 * outer * 64 + 8 * stages * inner
                  + 4 * inner * hd)
        # dK, dV hd/2 each a thread, Sᵀ and dPᵀ inner/2 each: as the mma.sync pass's one row tile
        check_fit(self.key, config, call, hd + inner, STATE_REGISTERS["backward"], shared)
        return {"attention_backward_delta": 0, "attention_backward_dkdv_dq": shared,
                "attention_backward_dq_convert": 0}

    def shared_memory(self, call: Call, config: Mapping[str, Any]) -> dict[str, int]:
        """Dynamic shared-memory bytes per kernel of ``config`` for ``call``, once the config fits the call."""
        if config.get("WGMMA"):
            return self.wgmma_shared_memory(call, config)
        hd, outer, inner = kernel_head_dim(call.inputs["q"].shape[3]), config["BLOCK_OUTER"], config["BLOCK_INNER"]
        # k and v (dK/dV) or q and dO (dQ) tiles of outer rows, STAGES × two tiles of inner rows, rows of hd + 8;
        # the dK/dV pass adds lse and delta for STAGES × inner rows, and with atomic dQ a step's dSᵀ (outer rows
        # of inner + 8)
        tiles = 2 * (hd + 8) * (2 * outer + 2 * config["STAGES"] * inner)
        dkdv = tiles + 8 * config["STAGES"] * inner
        dkdv_dq = dkdv + 2 * outer * (inner + 8)
        if config["SPLIT"]:  # a step's Pᵀ and dSᵀ, whatever the dQ
            if hd % 32:
                raise UnsupportedError(f"{self.key}: {config}: SPLIT halves the head dim over warp pairs, so it takes "
                                       f"multiples of 32; this call compiles for {hd}")
            dkdv = dkdv_dq = dkdv + 4 * outer * (inner + 8)
        mt = row_tiles(self.key, config, outer, config["WARPS"])
        # dK/dV pass: dK, dV mt·hd/2 each, Pᵀ and dSᵀ mt·inner/2 each (dQ pass: less; atomic dQ's product
        # holds inner·hd/(32·WARPS) sums while Pᵀ and dSᵀ are dead, no more than they)
        state = mt * (hd + inner)
        check_fit(self.key, config, call, state, STATE_REGISTERS["backward"],
                  dkdv_dq if config["DQ"] == "atomic" else dkdv)
        return {"attention_backward_delta": 0, "attention_backward_dkdv": dkdv, "attention_backward_dkdv_dq": dkdv_dq,
                "attention_backward_dq": tiles, "attention_backward_dq_convert": 0}

    def fitted(self, call: Call, config: Mapping[str, Any]) -> dict[str, Any]:
        """``config``; or where it is the default, its head dim's entry of ``hopper_defaults`` (on an sm_90
        device), else of ``head_dim_defaults``, the first that fits ``call``, else the default itself (which fits
        every call it supports)."""
        if config != self.config():
            return dict(config)
        hd = kernel_head_dim(call.inputs["q"].shape[3])
        tables = (self.hopper_defaults, self.head_dim_defaults) if sm90(call.device) else (self.head_dim_defaults,)
        return first_fitting(self, call, [table[hd] for table in tables if hd in table]) or dict(config)

    def plan(self, call: Call, config: Mapping[str, Any]) -> tuple[dict[str, Kernel], dict[str, int], dict[str, Any]]:
        """The kernels that run ``config``, fitted, for ``call`` (delta, dK/dV, and the dQ pass or dQ's conversion),
        their shared bytes and the fitted config: worked out and compiled at a key's first call, then a lookup."""
        plans = self.__dict__.setdefault("_plans", {})
        key = plan_key(call, config)
        found = plans.get(key)
        if found is None:
            fitted = self.fitted(call, config)
            shared = self.shared_memory(call, fitted)
            defines = call_defines(call, fitted)
            names = ("attention_backward_delta",
                     *(("attention_backward_dkdv_dq", "attention_backward_dq_convert") if fitted["DQ"] == "atomic"
                       else ("attention_backward_dkdv", "attention_backward_dq")))
            found = plans[key] = ({name: self.kernel(name, call.dtype, defines) for name in names}, shared, fitted)
        return found

    def run(self, call: Call, config: dict) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        trivial = trivial_backward(call)
        if trivial is not None:
            return trivial
        kernels, shared, config = self.plan(call, config)
        q, k, v, o, do = (aligned_rows(call.inputs[name]) for name in ("q", "k", "v", "o", "do"))
        lse = call.inputs["lse"].contiguous()
        (batch, heads, n_q, d), (_, kv_heads, n_k, _) = q.shape, k.shape
        dq, dk, dv = gradients_like(call)
        delta = torch.empty((batch, heads, n_q), dtype=torch.float32, device=q.device)
        atomic, hd = config["DQ"] == "atomic", kernel_head_dim(d)
        # dq_accum: rows of d, or (WGMMA) 64-row tiles of hd columns in the order of the dK/dV pass's accumulators
        accum_shape = ((batch, heads, -(-n_q // WGMMA_ROWS), WGMMA_ROWS * hd) if config["WGMMA"]
                       else (batch, heads, n_q, d))
        dq_accum = torch.zeros(accum_shape, dtype=torch.float32, device=q.device) if atomic else None
        mask, mask_strides, _ = mask_args(call)
        scale = call.params["scale"]
        outer, group, threads = config["BLOCK_OUTER"], heads // kv_heads, 32 * config["WARPS"]

        kernels["attention_backward_delta"](
            o, do, delta, *strides(o), *strides(do), heads, n_q, d,
            grid=(-(-n_q // DELTA_ROWS), batch * heads), block=256)
        dkdv = "attention_backward_dkdv_dq" if atomic else "attention_backward_dkdv"
        kernels[dkdv](
            q, k, v, mask, do, lse, delta, dk, dv, dq_accum, *strides(q), *strides(k), *strides(v), *strides(do),
            *strides(dk), *strides(dv), *mask_strides, heads, kv_heads, group, n_q, n_k, d, scale * LOG2E, scale,
            grid=(-(-n_k // outer), batch * kv_heads), block=threads, shared_mem=shared[dkdv])
        if atomic:  # a thread converts 8 floats (WGMMA: 16) of a head's sums
            per_thread, floats = (16, accum_shape[2] * accum_shape[3]) if config["WGMMA"] else (8, n_q * d)
            kernels["attention_backward_dq_convert"](
                dq_accum, dq, *strides(dq), heads, n_q, d, scale,
                grid=(-(-floats // (per_thread * CONVERT_CHUNKS)), batch * heads), block=CONVERT_CHUNKS)
        else:
            kernels["attention_backward_dq"](
                q, k, v, mask, do, lse, delta, dq, *strides(q), *strides(k), *strides(v), *strides(do),
                *strides(dq), *mask_strides, heads, group, n_q, n_k, d, scale * LOG2E, scale,
                grid=(-(-n_q // outer), batch * heads), block=threads, shared_mem=shared["attention_backward_dq"])
        return dq, dk, dv
