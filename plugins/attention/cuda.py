"""Attention in raw CUDA: FlashAttention-2's forward on tensor cores (cuda.cu, on ../_cuda/flash.cuh).

One block per (BLOCK_M query rows, batch·head), WARPS warps of 16 or 32 rows; K and V tiles of BLOCK_N keys
through a STAGES-deep cp.async ring; S = Q·Kᵀ and O += P·V by mma.sync m16n8k16 with float32 accumulation,
the online softmax in registers. float16 and bfloat16; head dims that are multiples of 8 up to 128 (compiled
for the next multiple of 16); GQA, causal (top-left) and attn_mask (bool or additive, any broadcast) as the
spec defines them. WGMMA 1 runs the same algorithm on Hopper's warpgroup MMAs (compiled for sm_90a; head dims
64 and 128, 64 query rows a warpgroup). The helpers here serve the backward's cuda plugin too.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import torch

from kernelzoo.backends.cuda import I64, CudaImplementation, Kernel, tensor_map, tensor_map_launch
from kernelzoo.errors import UnsupportedError
from kernelzoo.registry import Call

from . import like, trivial_forward

LOG2E = 1.4426950408889634
MAX_GRID_Y = 65535  # batch·heads is the grid's second dimension
MAX_HEAD_DIM = 128  # the o accumulators and q fragments of 16 rows fill a warp's registers at 128
DEFAULT_SHARED_OPTIN = 227 * 1024  # H100; the device's own figure is used where torch reports it
# Registers per thread that a config's tile state (accumulators, fragments, scores) may take. Measured with
# -Xptxas -v through NVRTC 13.5 for sm_90 over every config of the spaces at head dims 64 and 128: the forward
# spills nothing up to 168 (170-233 registers at 104-168), 8-16 bytes at 200 with head dim 128 (FlashAttention-2's
# 4 warps × 32 rows × 64 keys) and 80 with 64, and 400 or more beyond. With an attn_mask its index arithmetic
# takes more: 136-160 spill 20-352 bytes, so masked calls keep to 128. The backward spills at most 64 bytes up
# to 192 (the dQ pass's ptxas keeps 4-warp blocks near 168 registers with 8-40 bytes of spill even below that)
# and 316-4168 above.
STATE_REGISTERS = {"forward": 200, "forward_masked": 128, "backward": 192}
WGMMA_HEAD_DIMS = (64, 128)  # the swizzled tiles are 64-column blocks; past 128 the accumulators overflow
MASK_TYPES = {torch.bool: "unsigned char", torch.float32: "float", torch.float16: "kz_half",
              torch.bfloat16: "kz_bf16"}


def kernel_head_dim(d: int) -> int:
    """The HEAD_DIM a call's head dim d is compiled for: the next multiple of 16 (one k16 step of the mma)."""
    return max(16, -(-d // 16) * 16)


def unsupported(call: Call) -> str | None:
    """Why the cuda attention kernels cannot run ``call`` (beyond device and dtype), or None."""
    batch, heads, _, d = call.inputs["q"].shape
    if d % 8 or d > MAX_HEAD_DIM:
        return (f"head dim {d}: takes multiples of 8 (rows of 16-byte chunks) up to {MAX_HEAD_DIM} (a warp's "
                "16 rows of o accumulators and q fragments live in registers)")
    if batch * heads > MAX_GRID_Y:
        return f"batch·heads = {batch * heads} > {MAX_GRID_Y} (the grid's second dimension)"
    return None


def aligned_rows(t: torch.Tensor) -> torch.Tensor:
    """t as the kernels read it: head dim contiguous, every row starting 16 bytes aligned (the cp.async chunks);
    a (B, N, H, D) view as a projection gives qualifies as it is, others are copied."""
    ok = (t.stride(-1) == 1 and t.data_ptr() % 16 == 0
          and all(s % 8 == 0 for s, n in zip(t.stride()[:3], t.shape[:3]) if n > 1))
    return t if ok else t.clone(memory_format=torch.contiguous_format)


def strides(t: torch.Tensor) -> tuple[I64, I64, I64]:
    """Batch, head and row strides in elements, as the kernels take them."""
    return tuple(I64(s) for s in t.stride()[:3])  # type: ignore[return-value]


def mask_args(call: Call) -> tuple[torch.Tensor | None, tuple[I64, ...], dict[str, int | str]]:
    """The attn_mask as the kernels read it (broadcast to (B, Hq, Nq, Nk) by strides, no copy), its strides and
    the defines that pick its element type."""
    mask = call.inputs.get("attn_mask")
    if mask is None:
        return None, (I64(0),) * 4, {"MASK": 0}
    (b, h, n_q, _), n_k = call.inputs["q"].shape, call.inputs["k"].shape[2]
    view = mask.expand(b, h, n_q, n_k)
    return view, tuple(I64(s) for s in view.stride()), {
        "MASK": 1, "MASK_T": MASK_TYPES[mask.dtype], "MASK_BOOL": int(mask.dtype == torch.bool)}


def sm90(device: torch.device) -> bool:
    """Whether ``device`` is an sm_90 GPU (Hopper: H100, H200), the one sm_90a's wgmma code runs on."""
    return device.type == "cuda" and torch.cuda.get_device_capability(device) == (9, 0)


def check_wgmma_call(key: str, call: Call) -> None:
    """Refuse a WGMMA config (either plugin's) for ``call`` where its device is a GPU other than sm_90 or its
    kernel head dim is not one of WGMMA_HEAD_DIMS."""
    if call.device.type == "cuda" and not sm90(call.device):
        raise UnsupportedError(f"{key}: WGMMA runs on sm_90 (Hopper) devices only")
    hd = kernel_head_dim(call.inputs["q"].shape[3])
    if hd not in WGMMA_HEAD_DIMS:
        raise UnsupportedError(f"{key}: WGMMA takes head dims {WGMMA_HEAD_DIMS}, not {hd}")


def tma_unavailable(device: torch.device) -> str | None:
    """Why kernels that take tensor maps (PRODUCER 2 and 3) cannot launch on ``device``, or None; asked of CUDA
    devices only."""
    if device.type != "cuda":
        return None
    ok, reason = tensor_map_launch()
    return None if ok else reason


def shared_limit(device: torch.device) -> int:
    props = torch.cuda.get_device_properties(device)
    return getattr(props, "shared_memory_per_block_optin", DEFAULT_SHARED_OPTIN)


def row_tiles(key: str, config: Mapping[str, Any], outer: int, warps: int) -> int:
    """The m16 row tiles per warp when ``outer`` rows are split over ``warps`` warps (16 or 32 rows each)."""
    mt = outer // (16 * warps)
    if mt not in (1, 2) or mt * 16 * warps != outer:
        raise UnsupportedError(f"{key}: {config} gives {outer / warps:g} rows per warp; the kernels take 16 or 32")
    return mt


def check_fit(key: str, config: Mapping[str, Any], call: Call, state_words: float, budget: int, shared: int) -> None:
    """Raise UnsupportedError unless ``config`` fits ``call``: ``state_words`` 32-bit registers of tile state per
    thread within ``budget`` (see STATE_REGISTERS), ``shared`` bytes of shared memory within the device's."""
    if state_words > budget:
        raise UnsupportedError(f"{key}: {config} at head dim {kernel_head_dim(call.inputs['q'].shape[3])} keeps "
                               f"{state_words:g} registers of tile state per thread; above {budget} ptxas spills")
    limit = shared_limit(call.device)
    if shared > limit:
        raise UnsupportedError(f"{key}: {config} needs {shared} bytes of shared memory; a block has {limit}")


def first_fitting(impl: CudaImplementation, call: Call,
                  candidates: Iterable[Mapping[str, Any]]) -> dict[str, Any] | None:
    """The config of the first of ``candidates`` (overrides of ``impl``'s default) that fits ``call``, or None."""
    for overrides in candidates:
        candidate = impl.config(overrides)
        try:
            impl.shared_memory(call, candidate)
        except UnsupportedError:
            continue
        return candidate
    return None


def plan_key(call: Call, config: Mapping[str, Any]) -> tuple:
    """What the kernels, tiles and shared memory that run ``config`` for ``call`` depend on: the config, the head
    dim, the dtypes of the inputs and the mask, causal, the scale's sign, and the current device."""
    q, mask = call.inputs["q"], call.inputs.get("attn_mask")
    return (tuple(config.items()), q.shape[3], q.dtype, None if mask is None else mask.dtype, call.params["causal"],
            call.params["scale"] > 0, torch.cuda.current_device())


def call_defines(call: Call, config: Mapping[str, Any]) -> dict[str, Any]:
    """``config`` plus the call's code-shaping defines: HEAD_DIM, CAUSAL, SCALE_POSITIVE and the mask's."""
    return {**config, **mask_args(call)[2], "HEAD_DIM": kernel_head_dim(call.inputs["q"].shape[3]),
            "CAUSAL": int(call.params["causal"]), "SCALE_POSITIVE": int(call.params["scale"] > 0)}


class AttentionCuda(CudaImplementation):
    op = "attention"
    dtypes = {"cuda": (torch.float16, torch.bfloat16)}
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
    # PRODUCER 3: as 2, from a warpgroup of its own whose registers go to the consumers (setmaxnreg). OVERLAP 1
    # (with a producer): FlashAttention-3's order, tile j's S = Q·Kᵀ issued with tile j−1's P·V and its softmax
    # run while that P·V does.
    config_space = {"BLOCK_M": [64, 128, 192], "BLOCK_N": [32, 64, 128], "WARPS": [4, 8, 12], "STAGES": [2, 3],
                    "Q_REGS": [1, 0], "WGMMA": [0, 1], "PRODUCER": [0, 1, 2, 3], "OVERLAP": [0, 1]}
    # 4 warps of 32 rows, 64-key tiles, q in registers: the fastest at head dim 64 on the H100 (1.02× FA2 at
    # N = 4096; docs/perf/attention-cuda.md). Where it does not fit a call (its tile state at head dims past 64,
    # or with an attn_mask), a call given it runs the first fallback that fits: q from shared memory (FA2's tiles
    # at head dim 128, 1.01-1.03× FA2), then 8 warps of 16 rows (every call up to head dim 128, masks included:
    # 195 registers and 102 KiB at 128, 0.75-0.84× FA2).
    default_config = {"BLOCK_M": 128, "BLOCK_N": 64, "WARPS": 4, "STAGES": 2, "Q_REGS": 1, "WGMMA": 0, "PRODUCER": 0,
                      "OVERLAP": 0}
    fallbacks = ({"Q_REGS": 0}, {"WARPS": 8})
    # The warpgroup MMAs (hopper_defaults; the fastest first: a search of a few trials reaches only the first
    # seeds), then 32-key tiles with q from shared memory, which spill nothing at 128, and 8 warps of 16 rows.
    tuning_seeds = ({"WGMMA": 1, "WARPS": 8, "BLOCK_N": 128, "STAGES": 3, "PRODUCER": 3, "OVERLAP": 1},
                    {"WGMMA": 1, "WARPS": 4, "BLOCK_M": 64, "BLOCK_N": 128, "STAGES": 3, "PRODUCER": 2, "OVERLAP": 1},
                    {"WGMMA": 1, "WARPS": 8, "BLOCK_N": 64, "STAGES": 3, "PRODUCER": 2, "OVERLAP": 1},
                    {"WGMMA": 1, "WARPS": 4, "BLOCK_M": 64, "BLOCK_N": 128},
                    {"WGMMA": 1, "WARPS": 8, "BLOCK_N": 128, "STAGES": 3, "PRODUCER": 2},
                    {"WGMMA": 1, "WARPS": 12, "BLOCK_M": 192, "BLOCK_N": 128},
                    {"WARPS": 4, "BLOCK_N": 32, "Q_REGS": 0}, {"WARPS": 8})
    # On an sm_90 device a call given the default runs the warpgroup MMAs where they fit, before the default and
    # its fallbacks: per kernel head dim, the fastest in the runs of 2026-11-27 (H100, B=4 H=32 N=4096: at 64
    # one warpgroup with 128-key tiles in FlashAttention-3's order, 1.51-1.57× FA2, then without it, 1.47-1.51×;
    # at 128 two warpgroups, a producer warpgroup's TMA copies and that order with 128-key tiles, 1.78-1.89×,
    # then three warpgroups, 1.39-1.50×, then two), then 64-key tiles (what fits with an attn_mask at 128).
    hopper_defaults = {64: ({"WGMMA": 1, "WARPS": 4, "BLOCK_M": 64, "BLOCK_N": 128, "STAGES": 3, "PRODUCER": 2,
                             "OVERLAP": 1},
                            {"WGMMA": 1, "WARPS": 4, "BLOCK_M": 64, "BLOCK_N": 128}),
                       128: ({"WGMMA": 1, "WARPS": 8, "BLOCK_N": 128, "STAGES": 3, "PRODUCER": 3, "OVERLAP": 1},
                             {"WGMMA": 1, "WARPS": 12, "BLOCK_M": 192, "BLOCK_N": 128},
                             {"WGMMA": 1, "WARPS": 8, "BLOCK_N": 128, "STAGES": 3},
                             {"WGMMA": 1, "WARPS": 8, "BLOCK_N": 64, "STAGES": 3, "PRODUCER": 2, "OVERLAP": 1},
                             {"WGMMA": 1, "WARPS": 8, "BLOCK_N": 64, "STAGES": 3})}

    def supports(self, call: Call) -> str | None:
        return super().supports(call) or unsupported(call)

    def target(self, config: Mapping[str, Any], arch: str) -> str:
        """sm_90a for the warpgroup-MMA configs (both plugins'), else the device's arch."""
        return "sm_90a" if config.get("WGMMA") else arch

    def wgmma_shared_memory(self, call: Call, config: Mapping[str, Any]) -> dict[str, int]:
        """shared_memory() of a WGMMA config: the q tile and STAGES × (K, V) tiles, swizzled (no padding), and
        1024 bytes to align them; tile state: scores, o accumulators and P packed."""
        hd, bm, bn = kernel_head_dim(call.inputs["q"].shape[3]), config["BLOCK_M"], config["BLOCK_N"]
        check_wgmma_call(self.key, call)
        if bm != 16 * config["WARPS"] or not config["Q_REGS"]:
            raise UnsupportedError(f"{self.key}: WGMMA runs 64 rows a warpgroup (BLOCK_M = 16·WARPS) with Q_REGS 1 "
                                   f"(q is read by descriptor), not {config}")
        shared = 1024 + 2 * hd * (bm + 2 * config["STAGES"] * bn)
        if config.get("PRODUCER"):  # a warp or warpgroup more: 13 warps would leave a thread fewer registers than
            # the 158 needed
            if config["WARPS"] > 8:
                raise UnsupportedError(f"{self.key}: PRODUCER takes up to two warpgroups, not {config}")
            shared += 16 * config["STAGES"]  # a full and an empty mbarrier a stage
            why = tma_unavailable(call.device) if config["PRODUCER"] >= 2 else None
            if why:
                raise UnsupportedError(f"{self.key}: PRODUCER {config['PRODUCER']} loads by TMA, and {why}")
            if config.get("OVERLAP") and hd == 128 and bn == 128 and config["WARPS"] == 8 and config["PRODUCER"] < 3:
                raise UnsupportedError(f"{self.key}: OVERLAP with two warpgroups of 128-key tiles at head dim 128 "
                                       f"needs the registers PRODUCER 3 moves (168 a thread spill): {config}")
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

    def plan(self, call: Call, config: Mapping[str, Any]) -> tuple[Kernel, int, int, int, int]:
        """(kernel, BLOCK_M, threads, shared bytes, TMA box rows) that run ``config``, fitted, for ``call``: worked
        out and compiled at a key's first call, then a lookup (fitting the default took 2-9 µs of host per call).
        The box rows are BLOCK_N where the K and V tiles come by TMA (PRODUCER 2 and 3), else 0."""
        plans = self.__dict__.setdefault("_plans", {})
        key = plan_key(call, config)
        found = plans.get(key)
        if found is None:
            fitted = self.fitted(call, config)
            shared = self.shared_memory(call, fitted)["attention_forward"]
            kernel = self.kernel("attention_forward", call.dtype, call_defines(call, fitted))
            producer = fitted.get("PRODUCER", 0)
            threads = 32 * (fitted["WARPS"] + (4 if producer == 3 else producer > 0))
            box = fitted["BLOCK_N"] if producer >= 2 else 0
            found = plans[key] = (kernel, fitted["BLOCK_M"], threads, shared, box)
        return found

    def run(self, call: Call, config: dict) -> tuple[torch.Tensor, torch.Tensor]:
        trivial = trivial_forward(call)
        if trivial is not None:
            return trivial
        kernel, block_m, threads, shared, box = self.plan(call, config)
        q, k, v = (aligned_rows(call.inputs[name]) for name in ("q", "k", "v"))
        (batch, heads, n_q, d), (_, kv_heads, n_k, _) = q.shape, k.shape
        o, lse = like(call, q), call.empty((batch, heads, n_q), torch.float32)
        mask, mask_strides, _ = mask_args(call)
        # PRODUCER 2 and 3: K and V as 4-d tensor maps, boxes of 64 columns × BLOCK_N keys, 128-byte swizzled as the
        # warpgroup MMAs read them (coordinates: column, key, key/value head, batch)
        # (a broadcast dim, stride 0, is one the TMA unit cannot step along: such a tensor is copied first)
        if box:
            k, v = (t if all(s or n == 1 for s, n in zip(t.stride(), t.shape)) else t.contiguous() for t in (k, v))
        maps = (tensor_map(k, (64, box, 1, 1)), tensor_map(v, (64, box, 1, 1))) if box else ()
        kernel(q, k, v, mask, o, lse, *strides(q), *strides(k), *strides(v), *strides(o), *mask_strides,
               heads, heads // kv_heads, n_q, n_k, d, call.params["scale"] * LOG2E, *maps,
               grid=(-(-n_q // block_m), batch * heads), block=threads, shared_mem=shared)
        return o, lse
