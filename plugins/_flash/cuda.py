"""What the flash-attention CUDA plugins (attention, attention_backward) share: the head dims, masks and layouts
they take, the fitting of a config to a call (registers of tile state, shared memory, the warpgroup-MMA and TMA
requirements), the defines and launch arguments both passes compute alike, and their base class."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import torch

from kernelzoo.backends.cuda import I64, CudaImplementation, tensor_map_launch
from kernelzoo.errors import UnsupportedError
from kernelzoo.registry import Call

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


class FlashCuda(CudaImplementation):
    """Base of the attention CUDA plugins: compiled for sm_90a where a config asks for the warpgroup MMAs."""

    def target(self, config: Mapping[str, Any], arch: str) -> str:
        """sm_90a for the warpgroup-MMA configs (both plugins'), else the device's arch."""
        return "sm_90a" if config.get("WGMMA") else arch
