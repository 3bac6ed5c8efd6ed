"""What the flash-attention Triton plugins (attention, attention_backward) share: the @triton.jit helpers for
masks and tile loads and stores (through pointers or TMA tensor descriptors), and the launch arguments both passes
compute alike (head-dim block, product precision, mask strides, descriptors and whether they apply)."""

from __future__ import annotations

import functools

import torch
import triton
import triton.language as tl
from triton.runtime.errors import OutOfResources
from triton.tools.tensor_descriptor import TensorDescriptor

from kernelzoo.backends.triton import launcher, next_power_of_2
from kernelzoo.errors import UnsupportedError
from kernelzoo.registry import Call

LOG2E = 1.4426950408889634
MAX_GRID_Y = 65535  # batch·heads is the grid's second dimension



@triton.jit
def apply_mask(s, mask, MASK_BOOL: tl.constexpr):
    """Scores (log2 units) with an attn_mask tile applied: bool keeps or drops, float is added."""
    return tl.where(mask != 0, s, float("-inf")) if MASK_BOOL else s + mask.to(tl.float32) * 1.4426950408889634


@triton.jit
def load_tile(desc, ptrs, ok, b, h, row, ROWS: tl.constexpr, BLOCK_D: tl.constexpr, TMA: tl.constexpr):
    """The (ROWS, BLOCK_D) tile of one (batch b, head h) from `row` on: through the descriptor (zeros
    past N and the head dim), else from ptrs with zeros where ok is false."""
    if TMA:
        return desc.load([b, h, row, 0]).reshape(ROWS, BLOCK_D)
    return tl.load(ptrs, mask=ok, other=0.0)


@triton.jit
def store_tile(desc, ptrs, ok, b, h, row, value, ROWS: tl.constexpr, BLOCK_D: tl.constexpr, TMA: tl.constexpr):
    """Store the (ROWS, BLOCK_D) tile value of (b, h) from `row` on: through the descriptor (which drops
    what lies past N and the head dim), else to ptrs where ok is true."""
    if TMA:
        desc.store([b, h, row, 0], value.reshape(1, 1, ROWS, BLOCK_D))
    else:
        tl.store(ptrs, value, mask=ok)


@triton.jit
def masked_scores(s, mask_ptrs, offs_m, cols, n_q, n_k, stride_mn, MASKED: tl.constexpr, CAUSAL: tl.constexpr,
                  HAS_MASK: tl.constexpr, MASK_BOOL: tl.constexpr):
    """Scores s (rows offs_m × keys cols, log2 units) with the attn_mask tile applied and, when MASKED,
    the keys past n_k (and, CAUSAL, those after the row) set to -inf."""
    if HAS_MASK:
        bounds = (offs_m[:, None] < n_q) & (cols[None, :] < n_k)
        s = apply_mask(s, tl.load(mask_ptrs + cols[None, :] * stride_mn, mask=bounds, other=0), MASK_BOOL)
    if MASKED:
        keep = cols[None, :] < n_k
        if CAUSAL:
            keep = keep & (cols[None, :] <= offs_m[:, None])
        s = tl.where(keep, s, float("-inf"))
    return s


def head_block(d: int) -> int:
    """The head dim padded to a power of two (tl.dot needs at least 16)."""
    return max(16, next_power_of_2(d))


def precision(dtype: torch.dtype, block_d: int) -> str:
    """tl.dot's input precision. float32: three TF32 tensor-core products per product (tf32x3; o's
    error at N = 1023, emulated: 7e-8, against 5e-7 for float32 FMA and 1.9e-4 for plain TF32) where
    its larger tiles fit shared memory at the default configs (head dims up to 64: 131-164 KiB on
    sm_90; 262-328 KiB at 128), IEEE FMA beyond (164-180 KiB at 128, but 20-170 s to compile each
    kernel on a 2-core machine). Half inputs: the value is ignored."""
    if dtype != torch.float32:
        return "tf32"
    return "tf32x3" if block_d <= 64 else "ieee"


def mask_args(call: Call) -> tuple[torch.Tensor | None, tuple[int, int, int, int], bool]:
    """The mask tensor as the kernels read it (bool, or float of any width; broadcast by strides)."""
    mask = call.inputs.get("attn_mask")
    if mask is None:
        return None, (0, 0, 0, 0), False
    (b, h, n_q, _), n_k = call.inputs["q"].shape, call.inputs["k"].shape[2]
    view = mask.expand(b, h, n_q, n_k)
    return view, view.stride(), mask.dtype == torch.bool


def launch(kernel: triton.JITFunction, grid: tuple[int, ...], *args: object, **kwargs: object) -> None:
    """Launch (through the kernel's Launcher: a repeated call skips Triton's argument binding); a config the
    GPU cannot hold (shared memory, registers) is unsupported, not a crash."""
    try:
        launcher(kernel)(grid, *args, **kwargs)
    except OutOfResources as exc:
        raise UnsupportedError(f"config {kwargs} does not fit on this GPU: {exc}") from None


def rows_contiguous(t: torch.Tensor) -> torch.Tensor:
    """t with a contiguous head dim (the kernels take any batch, head and row strides)."""
    return t if t.stride(-1) == 1 else t.contiguous()


@functools.cache
def has_tma(device: torch.device) -> bool:
    """sm_90 and newer GPUs have the tensor memory accelerator (TMA) that descriptors drive."""
    return device.type == "cuda" and torch.cuda.get_device_capability(device)[0] >= 9


def descriptors_apply(*tensors: torch.Tensor) -> bool:
    """Whether the kernels read and write these (B, H, N, D) tensors through TMA descriptors: half
    floats on a GPU with TMA, each base address and stride a multiple of 16 bytes (what a
    descriptor takes; a stride 0 broadcast does not qualify). float32 keeps its pointer loads: its
    tf32x3 and IEEE products were tuned on them."""
    t = tensors[0]
    if t.dtype not in (torch.float16, torch.bfloat16) or not has_tma(t.device):
        return False
    return all(x.data_ptr() % 16 == 0 and x.stride(-1) == 1
               and all(st > 0 and st * x.element_size() % 16 == 0 for st in x.stride()[:-1]) for x in tensors)


def descriptor(t: torch.Tensor, rows: int, block_d: int) -> TensorDescriptor:
    """A descriptor of the (B, H, N, D) tensor t whose block is `rows` rows of one (batch, head),
    block_d columns wide: reads past N or D give zeros, writes there are dropped."""
    return TensorDescriptor(t, list(t.shape), list(t.stride()), [1, 1, rows, block_d])
