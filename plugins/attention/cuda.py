"""Attention in raw CUDA: FlashAttention-2's forward on tensor cores (cuda.cu, on ../_cuda/flash.cuh).

One block per (BLOCK_M query rows, batch·head), WARPS warps of 16 or 32 rows; K and V tiles of BLOCK_N keys
through a STAGES-deep cp.async ring; S = Q·Kᵀ and O += P·V by mma.sync m16n8k16 with float32 accumulation,
the online softmax in registers. float16 and bfloat16; head dims that are multiples of 8 up to 128 (compiled
for the next multiple of 16); GQA, causal (top-left) and attn_mask (bool or additive, any broadcast) as the
spec defines them. WGMMA 1 runs the same algorithm on Hopper's warpgroup MMAs (compiled for sm_90a; head dims
64 and 128, 64 query rows a warpgroup). What both passes share is the family's (plugins/_flash/cuda.py).

FP8 (float8_e4m3fn or float8_e5m2 q, k, v with their descales; out_dtype bfloat16 or float16): q_descale·k_descale
folds into the scale and v_descale into the final normalisation, and V is converted to float16 once per call
(exactly), so that P·V multiplies P rounded to float16, as the Triton plugin's PV_FP8 0 does (P in 8 bits misses
the op's tolerance). The warpgroup kernel at head dim 128 multiplies S = Q·Kᵀ in the 8-bit floats (m64nNk32
wgmma); other head dims and configs convert q and k to float16 as well and run the 16-bit products.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
from kernelzoo_plugins._cuda import F8_TYPES
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
    tma_unavailable,
    unsupported,
)
from kernelzoo_plugins._flash.fp8 import descale_views, output_dtype, trivial_output
from kernelzoo_plugins._flash.spec import like

from kernelzoo.backends.cuda import I64, Kernel, tensor_map
from kernelzoo.backends.cuda.compiler import dtype_define
from kernelzoo.errors import UnsupportedError
from kernelzoo.registry import FP8, Call, dtype_name, parse_dtype

FP8_HEAD_DIM = 128  # an 8-bit q or k row fills one 128-byte swizzled line


def spills_in_three_warpgroups(config: Mapping[str, Any], head_dim: int, masked: bool) -> bool:
    """Whether ``config``'s three consumer warpgroups (12 warps and a producer warpgroup: 160 registers a thread)
    spill at ``head_dim``: with an attn_mask (68 bytes a thread at 64), and in FlashAttention-3's order with 128-key
    tiles at 128 (336), as ptxas (NVRTC 13.5) builds them."""
    return (config["WARPS"] == 12 and config.get("PRODUCER") == 3
            and (masked or bool(config.get("OVERLAP") and head_dim == 128 and config["BLOCK_N"] == 128)))


class AttentionCuda(FlashCuda):
    op = "attention"
    dtypes = {"cuda": (torch.float16, torch.bfloat16, *FP8)}
    # BLOCK_M query rows per block over WARPS warps (16 or 32 rows each); BLOCK_N keys per tile; STAGES tiles
    # of K and V in flight; Q_REGS 1 keeps the q fragments in registers for the whole key loop, 0 reads them
    # from the q tile in shared memory at every k16 step (what lets 32 rows per warp fit at head dim 128:
    # FlashAttention-2's 4 warps × 32 rows, which halves the K and V reads from shared memory per FLOP).
    # 1728 points; for a call, those whose tile state overflows the registers (STATE_REGISTERS) or whose tiles
    # overflow shared memory are rejected.
    # WGMMA 1: the warpgroup-MMA kernel (sm_90 devices only), 16 rows a warp (BLOCK_M = 16·WARPS: one to three
    # warpgroups) and q read by descriptor (Q_REGS 1 only, which it ignores); its points outside that are
    # rejected, not run twice. 12 warps (192 rows) are the warpgroup kernel's only. PRODUCER 1 (warpgroup kernel,
    # up to 8 warps): one warp more loads K and V, handing stages over by mbarriers instead of a barrier a tile;
    # PRODUCER 2: that warp's first thread loads them by TMA (a tile is 2·HEAD_DIM/64 copies, not 64 a lane);
    # PRODUCER 3: as 2, from a warpgroup of its own whose registers go to the consumers (setmaxnreg; up to three
    # consumer warpgroups, 160 registers a thread with three). OVERLAP 1
    # (with a producer): FlashAttention-3's order, tile j's S = Q·Kᵀ issued with tile j−1's P·V and its softmax
    # run while that P·V does.
    config_space = {"BLOCK_M": [64, 128, 192], "BLOCK_N": [32, 64, 128], "WARPS": [4, 8, 12], "STAGES": [2, 3],
                    "Q_REGS": [1, 0], "WGMMA": [0, 1], "PRODUCER": [0, 1, 2, 3], "OVERLAP": [0, 1]}
    # 4 warps of 32 rows, 64-key tiles, q in registers: the fastest mma.sync config at head dim 64. Where it does
    # not fit a call (its tile state at head dims past 64, or with an attn_mask), a call given it runs the first
    # fallback that fits: q from shared memory (FA2's tiles, the fastest at head dim 128), then 8 warps of 16 rows
    # (every call up to head dim 128, masks included). Figures: docs/design/flash-attention.md.
    default_config = {"BLOCK_M": 128, "BLOCK_N": 64, "WARPS": 4, "STAGES": 2, "Q_REGS": 1, "WGMMA": 0, "PRODUCER": 0,
                      "OVERLAP": 0}
    fallbacks = ({"Q_REGS": 0}, {"WARPS": 8})
    # The warpgroup MMAs (hopper_defaults; the fastest first: a search of a few trials reaches only the first
    # seeds), then 32-key tiles with q from shared memory, which spill nothing at 128, and 8 warps of 16 rows.
    tuning_seeds = ({"WGMMA": 1, "WARPS": 8, "BLOCK_N": 128, "STAGES": 3, "PRODUCER": 3, "OVERLAP": 1},
                    {"WGMMA": 1, "WARPS": 12, "BLOCK_M": 192, "BLOCK_N": 128, "STAGES": 3, "PRODUCER": 3,
                     "OVERLAP": 1},
                    {"WGMMA": 1, "WARPS": 4, "BLOCK_M": 64, "BLOCK_N": 128, "STAGES": 3, "PRODUCER": 2, "OVERLAP": 1},
                    {"WGMMA": 1, "WARPS": 8, "BLOCK_N": 64, "STAGES": 3, "PRODUCER": 2, "OVERLAP": 1},
                    {"WGMMA": 1, "WARPS": 4, "BLOCK_M": 64, "BLOCK_N": 128},
                    {"WGMMA": 1, "WARPS": 8, "BLOCK_N": 128, "STAGES": 3, "PRODUCER": 2},
                    {"WGMMA": 1, "WARPS": 12, "BLOCK_M": 192, "BLOCK_N": 128},
                    {"WARPS": 4, "BLOCK_N": 32, "Q_REGS": 0}, {"WARPS": 8})
    # On an sm_90 device a call given the default runs the warpgroup MMAs where they fit, before the default and
    # its fallbacks: per kernel head dim, the fastest first (at 64 three warpgroups of 64 rows and a producer
    # warpgroup's TMA copies in FlashAttention-3's order with 128-key tiles, then one warpgroup that way, then
    # without the order; at 128 two warpgroups, a producer warpgroup's TMA copies and that order with 128-key
    # tiles, then three warpgroups, then two), then 64-key tiles (what fits with an attn_mask at 128). The
    # ranking: docs/design/flash-attention.md.
    hopper_defaults = {64: ({"WGMMA": 1, "WARPS": 12, "BLOCK_M": 192, "BLOCK_N": 128, "STAGES": 3, "PRODUCER": 3,
                             "OVERLAP": 1},
                            {"WGMMA": 1, "WARPS": 4, "BLOCK_M": 64, "BLOCK_N": 128, "STAGES": 3, "PRODUCER": 2,
                             "OVERLAP": 1},
                            {"WGMMA": 1, "WARPS": 4, "BLOCK_M": 64, "BLOCK_N": 128}),
                       128: ({"WGMMA": 1, "WARPS": 8, "BLOCK_N": 128, "STAGES": 3, "PRODUCER": 3, "OVERLAP": 1},
                             {"WGMMA": 1, "WARPS": 12, "BLOCK_M": 192, "BLOCK_N": 128},
                             {"WGMMA": 1, "WARPS": 8, "BLOCK_N": 128, "STAGES": 3},
                             {"WGMMA": 1, "WARPS": 8, "BLOCK_N": 64, "STAGES": 3, "PRODUCER": 2, "OVERLAP": 1},
                             {"WGMMA": 1, "WARPS": 8, "BLOCK_N": 64, "STAGES": 3})}

    def supports(self, call: Call) -> str | None:
        return super().supports(call) or unsupported(call)

    def defines(self, dtype: torch.dtype, config: Mapping[str, Any]) -> dict[str, int | float | str]:
        """T is ``dtype``, except for 8-bit floats: then T is float16 (V's type in the kernel, and q's and k's
        16-bit views), QK_F8 the 8-bit kind and O_T o's type (config's "out", bfloat16 unless given)."""
        if dtype not in FP8:
            return super().defines(dtype, config)
        out = parse_dtype(config.get("out", "bfloat16"))
        return {**super().defines(torch.float16, config), "QK_F8": F8_TYPES[dtype], "O_T": dtype_define(out)}

    def wgmma_shared_memory(self, call: Call, config: Mapping[str, Any]) -> dict[str, int]:
        """shared_memory() of a WGMMA config: the q tile and STAGES × (K, V) tiles, swizzled (no padding), and
        1024 bytes to align them; tile state: scores, o accumulators and P packed."""
        hd, bm, bn = kernel_head_dim(call.inputs["q"].shape[3]), config["BLOCK_M"], config["BLOCK_N"]
        check_wgmma_call(self.key, call)
        if bm != 16 * config["WARPS"] or not config["Q_REGS"]:
            raise UnsupportedError(f"{self.key}: WGMMA runs 64 rows a warpgroup (BLOCK_M = 16·WARPS) with Q_REGS 1 "
                                   f"(q is read by descriptor), not {config}")
        if call.dtype in FP8 and hd == FP8_HEAD_DIM:  # 8-bit q and K tiles, float16 V tiles; o leaves through rows
            # of hd + 8 from the q tile
            shared = 1024 + max(hd * (bm + 3 * config["STAGES"] * bn), 2 * (hd + 8) * bm)
        else:
            shared = 1024 + 2 * hd * (bm + 2 * config["STAGES"] * bn)
        if config.get("PRODUCER"):  # a warp or warpgroup more: 13 warps would leave a thread fewer registers than
            # the 158 needed
            if config["WARPS"] > 8 and config["PRODUCER"] < 3:
                raise UnsupportedError(f"{self.key}: PRODUCER {config['PRODUCER']} takes up to two warpgroups (a "
                                       f"producer warpgroup, PRODUCER 3, up to three), not {config}")
            shared += 16 * config["STAGES"]  # a full and an empty mbarrier a stage
            why = tma_unavailable(call.device) if config["PRODUCER"] >= 2 else None
            if why:
                raise UnsupportedError(f"{self.key}: PRODUCER {config['PRODUCER']} loads by TMA, and {why}")
            if config.get("OVERLAP") and hd == 128 and bn == 128 and config["WARPS"] == 8 and config["PRODUCER"] < 3:
                raise UnsupportedError(f"{self.key}: OVERLAP with two warpgroups of 128-key tiles at head dim 128 "
                                       f"needs the registers PRODUCER 3 moves (168 a thread spill): {config}")
            if spills_in_three_warpgroups(config, hd, call.inputs.get("attn_mask") is not None):
                raise UnsupportedError(f"{self.key}: three consumer warpgroups (160 registers a thread) spill with "
                                       f"an attn_mask, and in FlashAttention-3's order with 128-key tiles at head "
                                       f"dim 128: {config}")
        elif config.get("OVERLAP"):
            raise UnsupportedError(f"{self.key}: OVERLAP hands stages back by a PRODUCER's mbarriers: {config}")
        budget = STATE_REGISTERS["forward" if call.inputs.get("attn_mask") is None else "forward_masked"]
        check_fit(self.key, config, call, bn / 2 + hd / 2 + bn / 4, budget, shared)
        return {"attention_forward": shared}

    def shared_memory(self, call: Call, config: Mapping[str, Any]) -> dict[str, int]:
        """Dynamic shared-memory bytes per kernel of ``config`` for ``call``, once the config fits the call."""
        if config.get("WGMMA"):
            return self.wgmma_shared_memory(call, config)
        hd, bm, bn = kernel_head_dim(call.inputs["q"].shape[3]), config["BLOCK_M"], config["BLOCK_N"]
        if config.get("PRODUCER") or config.get("OVERLAP"):
            raise UnsupportedError(f"{self.key}: PRODUCER and OVERLAP are the warpgroup kernel's: {config}")
        if config["WARPS"] not in (4, 8):
            raise UnsupportedError(f"{self.key}: the mma.sync kernel runs 4 or 8 warps, not {config['WARPS']} (its "
                                   "tile state takes more registers than 12 warps leave a thread)")
        shared = 2 * (hd + 8) * (bm + 2 * config["STAGES"] * bn)  # q, STAGES × (K, V) tiles, rows of hd + 8
        mt = row_tiles(self.key, config, bm, config["WARPS"])
        # o accumulators mt·hd/2 and scores mt·bn/2; q fragments mt·hd/4 (Q_REGS) or one k16 step's, 4·mt
        state = mt * (hd + bn) / 2 + (mt * hd / 4 if config["Q_REGS"] else 4 * mt)
        budget = STATE_REGISTERS["forward" if call.inputs.get("attn_mask") is None else "forward_masked"]
        check_fit(self.key, config, call, state, budget, shared)
        return {"attention_forward": shared}

    def fitted(self, call: Call, config: Mapping[str, Any]) -> dict[str, Any]:
        """``config``; or where it is the default, the first Hopper default that fits ``call`` on an sm_90 device,
        else the default itself where it fits, else the first fallback that does."""
        if config != self.config():
            return dict(config)
        first = self.hopper_defaults.get(kernel_head_dim(call.inputs["q"].shape[3]), ()) if sm90(call.device) else ()
        # fits nothing: shared_memory() says why
        return first_fitting(self, call, (*first, {}, *self.fallbacks)) or dict(config)

    def plan(self, call: Call, config: Mapping[str, Any]) -> tuple[Kernel, int, int, int, int, bool]:
        """(kernel, BLOCK_M, threads, shared bytes, TMA box rows, 8-bit Q·Kᵀ) that run ``config``, fitted, for
        ``call``: worked out and compiled at a key's first call, then a lookup (fitting the default took 2-9 µs of
        host per call). The box rows are BLOCK_N where the K and V tiles come by TMA (PRODUCER 2 and 3), else 0."""
        plans = self.__dict__.setdefault("_plans", {})
        key = plan_key(call, config)
        if call.dtype in FP8:
            key += (call.params["out_dtype"],)
        found = plans.get(key)
        if found is None:
            fitted = self.fitted(call, config)
            shared = self.shared_memory(call, fitted)["attention_forward"]
            defines = call_defines(call, fitted)
            if call.dtype in FP8:  # one build whatever the scale's sign: the kernel picks the scores' path on the
                # device, where the descales' sign is known
                defines.update(SCALE_POSITIVE=0, out=dtype_name(output_dtype(call)))
            kernel = self.kernel("attention_forward", call.dtype, defines)
            producer = fitted.get("PRODUCER", 0)
            threads = 32 * (fitted["WARPS"] + (4 if producer == 3 else producer > 0))
            box = fitted["BLOCK_N"] if producer >= 2 else 0
            eight_bit = (call.dtype in FP8 and bool(fitted["WGMMA"])
                         and kernel_head_dim(call.inputs["q"].shape[3]) == FP8_HEAD_DIM)
            found = plans[key] = (kernel, fitted["BLOCK_M"], threads, shared, box, eight_bit)
        return found

    def run(self, call: Call, config: dict) -> tuple[torch.Tensor, torch.Tensor]:
        trivial = trivial_output(call)
        if trivial is not None:
            return trivial
        kernel, block_m, threads, shared, box, eight_bit = self.plan(call, config)
        if call.dtype in FP8:  # q and k as float16 pairs of 8-bit floats (8-bit Q·Kᵀ) or converted, V converted
            # (both exactly), the descales as (B, Hk) views
            q, k = (float16_pairs(call.inputs[name]) if eight_bit
                    else call.inputs[name].to(torch.float16, memory_format=torch.contiguous_format)
                    for name in ("q", "k"))
            v = call.inputs["v"].to(torch.float16, memory_format=torch.contiguous_format)
            descales = descale_views(call)
            scales = (*descales, *(I64(st) for t in descales for st in t.stride()))
            o = like(call, call.inputs["q"], output_dtype(call))
        else:
            q, k, v = (aligned_rows(call.inputs[name]) for name in ("q", "k", "v"))
            scales = ()
            o = like(call, q)
        (batch, heads, n_q, _), (_, kv_heads, n_k, _) = q.shape, k.shape
        d = call.inputs["q"].shape[3]
        lse = call.empty((batch, heads, n_q), torch.float32)
        mask, mask_strides, _ = mask_args(call)
        # PRODUCER 2 and 3: K and V as 4-d tensor maps, boxes of 64 columns × BLOCK_N keys, 128-byte swizzled as the
        # warpgroup MMAs read them (coordinates: column, key, key/value head, batch)
        # (a broadcast dim, stride 0, is one the TMA unit cannot step along: such a tensor is copied first)
        if box:
            k, v = (t if all(s or n == 1 for s, n in zip(t.stride(), t.shape)) else t.contiguous() for t in (k, v))
        maps = (tensor_map(k, (64, box, 1, 1)), tensor_map(v, (64, box, 1, 1))) if box else ()
        kernel(q, k, v, mask, o, lse, *strides(q), *strides(k), *strides(v), *strides(o), *mask_strides,
               heads, heads // kv_heads, n_q, n_k, d, call.params["scale"] * LOG2E, *scales, *maps,
               grid=(-(-n_q // block_m), batch * heads), block=threads, shared_mem=shared)
        return o, lse


def float16_pairs(t: torch.Tensor) -> torch.Tensor:
    """An 8-bit float (B, H, N, d) tensor as the FP8 kernel reads it: a float16 view (B, H, N, d/2) of the same
    bytes, every row 16-byte aligned. The kernel reads whole 16-byte chunks, so rows whose d is not a multiple of
    16 are copied into rows padded with zeros, as are rows that are not aligned."""
    ok = (t.stride(-1) == 1 and t.data_ptr() % 16 == 0 and t.shape[3] % 16 == 0
          and all(s % 16 == 0 for s, n in zip(t.stride()[:3], t.shape[:3]) if n > 1))
    if not ok:
        padded = t.new_zeros((*t.shape[:3], -(-t.shape[3] // 16) * 16))[..., :t.shape[3]]
        t = padded.copy_(t)
    return t.view(torch.float16)
