"""Attention in Triton, FlashAttention-2's forward: one program per (block of BLOCK_M query rows,
batch·head); K and V streamed in blocks of BLOCK_N keys with an online softmax in base 2 (the
scale folded into log2 e, so exp2 is the exponential); lse stored for the backward.

The key loop is split in two: blocks that every row of the program sees entirely run without any
mask arithmetic, then the rest (the causal diagonal, the tail past Nk) with the boundary and causal
masks. Causal programs stop at their last row's diagonal: the blocks above it are never loaded.
GQA maps query head h to key/value head h // group. The head dim is padded to BLOCK_D, a power of
two, with masked loads for 80 or 96. An attn_mask is loaded per tile through its broadcast strides
(bool as is, float added in log2 units). float16/bfloat16 multiply on tensor cores with float32
accumulation; float32 at float32's accuracy (see precision(): TF32 alone would miss the float32
tolerance 20-fold).

On sm_90 and newer, half-float q, k, v and o move through TMA tensor descriptors: the copy engine
fills shared memory straight from global memory, zero-filling rows past N and columns past the
head dim, and drops the stores there. Same tiles on the H100 at D = 128: 500-526 TFLOP/s against
308-315 through pointers (docs/perf/attention-triton.md). Other calls load through pointers.
"""

from __future__ import annotations

import functools

import torch
import triton
import triton.language as tl
from triton.runtime.errors import OutOfResources
from triton.tools.tensor_descriptor import TensorDescriptor

from kernelzoo.backends.triton import TritonImplementation, launcher
from kernelzoo.errors import UnsupportedError
from kernelzoo.registry import Call

from . import like, trivial_forward

LOG2E = 1.4426950408889634
LN2 = 0.6931471805599453
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


@triton.jit
def _forward_blocks(acc, l_i, m_i, q, k_ptrs, v_ptrs, k_desc, v_desc, b, hk, mask_ptrs, offs_m, offs_n, offs_d,
                    start, end, stride_kn, stride_vn, stride_mn, n_q, n_k, head_dim, qk_scale,
                    MASKED: tl.constexpr, CAUSAL: tl.constexpr, HAS_MASK: tl.constexpr, MASK_BOOL: tl.constexpr,
                    EVEN_D: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr, TMA: tl.constexpr,
                    POS_SCALE: tl.constexpr, PRECISION: tl.constexpr):
    """Key blocks start..end of one program's rows into (acc, l_i, m_i). MASKED: apply the key
    bound and the causal mask (else every key of these blocks is seen by every row). TMA: K and V
    come through the descriptors k_desc and v_desc (b, hk: the program's batch and kv head)."""
    for start_n in range(start, end, BLOCK_N):
        cols = start_n + offs_n
        if TMA:
            k = k_desc.load([b, hk, start_n, 0]).reshape(BLOCK_N, BLOCK_D).T
        elif MASKED:
            kv_ok = cols < n_k
            if EVEN_D:
                k = tl.load(k_ptrs + start_n * stride_kn, mask=kv_ok[None, :], other=0.0)
            else:
                k = tl.load(k_ptrs + start_n * stride_kn, mask=kv_ok[None, :] & (offs_d[:, None] < head_dim),
                            other=0.0)
        elif EVEN_D:
            k = tl.load(k_ptrs + start_n * stride_kn)
        else:
            k = tl.load(k_ptrs + start_n * stride_kn, mask=offs_d[:, None] < head_dim, other=0.0)
        s = tl.dot(q, k, input_precision=PRECISION)  # (BLOCK_M, BLOCK_N)
        if MASKED or HAS_MASK or not POS_SCALE:
            s = masked_scores(s * qk_scale, mask_ptrs, offs_m, cols, n_q, n_k, stride_mn, MASKED, CAUSAL, HAS_MASK,
                              MASK_BOOL)  # log2 units
            m_new = tl.maximum(m_i, tl.max(s, 1))
            # with a mask, a row may have seen no key yet: keep exp2 away from -inf - -inf
            m_new_safe = tl.where(m_new == float("-inf"), 0.0, m_new) if HAS_MASK else m_new
            p = tl.exp2(s - m_new_safe[:, None])
        else:
            # nothing masked and a positive scale: max(s)·scale is the scaled max, and the scale
            # folds into exp2's argument, one FMA per score
            m_new = tl.maximum(m_i, tl.max(s, 1) * qk_scale)
            m_new_safe = m_new
            p = tl.exp2(s * qk_scale - m_new[:, None])
        alpha = tl.exp2(m_i - m_new_safe)
        l_i = l_i * alpha + tl.sum(p, 1)
        if TMA:
            v = v_desc.load([b, hk, start_n, 0]).reshape(BLOCK_N, BLOCK_D)
        elif MASKED:
            if EVEN_D:
                v = tl.load(v_ptrs + start_n * stride_vn, mask=kv_ok[:, None], other=0.0)
            else:
                v = tl.load(v_ptrs + start_n * stride_vn, mask=kv_ok[:, None] & (offs_d[None, :] < head_dim),
                            other=0.0)
        elif EVEN_D:
            v = tl.load(v_ptrs + start_n * stride_vn)
        else:
            v = tl.load(v_ptrs + start_n * stride_vn, mask=offs_d[None, :] < head_dim, other=0.0)
        acc = tl.dot(p.to(v.dtype), v, acc * alpha[:, None], input_precision=PRECISION)  # accumulates in place
        m_i = m_new
    return acc, l_i, m_i


@triton.jit
def _attention_forward(Q, K, V, MASK, OUT, LSE, Q_DESC, K_DESC, V_DESC, O_DESC,
                       stride_qb, stride_qh, stride_qm, stride_kb, stride_kh, stride_kn,
                       stride_vb, stride_vh, stride_vn, stride_ob, stride_oh, stride_om,
                       stride_mb, stride_mh, stride_mm, stride_mn,
                       heads, group, n_q, n_k, head_dim, qk_scale,
                       CAUSAL: tl.constexpr, HAS_MASK: tl.constexpr, MASK_BOOL: tl.constexpr,
                       BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr,
                       EVEN_D: tl.constexpr, TMA: tl.constexpr, POS_SCALE: tl.constexpr, PRECISION: tl.constexpr):
    # causal: the last query blocks see the most keys; they launch first, so the grid ends on short ones
    m_block = tl.num_programs(0) - 1 - tl.program_id(0) if CAUSAL else tl.program_id(0)
    start_m = m_block * BLOCK_M
    bh = tl.program_id(1)
    b32, h32 = bh // heads, bh % heads  # descriptor coordinates are 32-bit
    hk32 = h32 // group
    b, h, hk = b32.to(tl.int64), h32.to(tl.int64), hk32.to(tl.int64)
    offs_m = start_m + tl.arange(0, BLOCK_M)
    offs_n = tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, BLOCK_D)
    row_ok = offs_m < n_q
    ok = row_ok[:, None] if EVEN_D else row_ok[:, None] & (offs_d[None, :] < head_dim)
    q = load_tile(Q_DESC, Q + b * stride_qb + h * stride_qh + offs_m[:, None] * stride_qm + offs_d[None, :], ok,
                  b32, h32, start_m, BLOCK_M, BLOCK_D, TMA)
    k_ptrs = K + b * stride_kb + hk * stride_kh + offs_n[None, :] * stride_kn + offs_d[:, None]  # Kᵀ tile
    v_ptrs = V + b * stride_vb + hk * stride_vh + offs_n[:, None] * stride_vn + offs_d[None, :]
    mask_ptrs = MASK + b * stride_mb + h * stride_mh + offs_m[:, None] * stride_mm
    m_i = tl.full((BLOCK_M,), float("-inf"), tl.float32)
    l_i = tl.zeros((BLOCK_M,), tl.float32)
    acc = tl.zeros((BLOCK_M, BLOCK_D), tl.float32)
    # Blocks seen whole by every row: below the diagonal (causal), and inside [0, n_k).
    full_end = (n_k // BLOCK_N) * BLOCK_N
    if CAUSAL:
        full_end = tl.minimum(full_end, (start_m // BLOCK_N) * BLOCK_N)
        end = tl.minimum(n_k, start_m + BLOCK_M)
    else:
        end = n_k
    acc, l_i, m_i = _forward_blocks(acc, l_i, m_i, q, k_ptrs, v_ptrs, K_DESC, V_DESC, b32, hk32, mask_ptrs, offs_m,
                                    offs_n, offs_d, 0, full_end, stride_kn, stride_vn, stride_mn, n_q, n_k, head_dim,
                                    qk_scale, False, CAUSAL, HAS_MASK, MASK_BOOL, EVEN_D, BLOCK_N, BLOCK_D, TMA,
                                    POS_SCALE, PRECISION)
    acc, l_i, m_i = _forward_blocks(acc, l_i, m_i, q, k_ptrs, v_ptrs, K_DESC, V_DESC, b32, hk32, mask_ptrs, offs_m,
                                    offs_n, offs_d, full_end, end, stride_kn, stride_vn, stride_mn, n_q, n_k, head_dim,
                                    qk_scale, True, CAUSAL, HAS_MASK, MASK_BOOL, EVEN_D, BLOCK_N, BLOCK_D, TMA,
                                    POS_SCALE, PRECISION)
    # Rows that saw no key: l = 0, acc = 0; o = 0 and lse = -inf.
    l_safe = tl.where(l_i == 0.0, 1.0, l_i)
    o = acc / l_safe[:, None]
    lse = (m_i + tl.log2(l_i)) * 0.6931471805599453
    store_tile(O_DESC, OUT + b * stride_ob + h * stride_oh + offs_m[:, None] * stride_om + offs_d[None, :], ok,
               b32, h32, start_m, o.to(OUT.dtype.element_ty), BLOCK_M, BLOCK_D, TMA)
    tl.store(LSE + (b * heads + h) * n_q + offs_m, lse, mask=row_ok)


def head_block(d: int) -> int:
    """The head dim padded to a power of two (tl.dot needs at least 16)."""
    return max(16, triton.next_power_of_2(d))


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


class AttentionTriton(TritonImplementation):
    op = "attention"
    config_space = {"BLOCK_M": [32, 64, 128], "BLOCK_N": [32, 64, 128], "num_warps": [4, 8],
                    "num_stages": [1, 2, 3, 4]}
    # TMA loads (half floats, sm_90): one warpgroup owns 128 query rows; at D = 128, N >= 4096 on the
    # H100 it ran 464-518 TFLOP/s against 393-415 for 8 warps (scripts/attention_triton_configs.py)
    default_config = {"BLOCK_M": 128, "BLOCK_N": 64, "num_warps": 4, "num_stages": 2}
    # The default of pointer loads and of head dims past 128, where a 128-row accumulator over 4 warps
    # would spill: two stages of 64 × 256 half K and V tiles and q fit in the H100's 228 KiB. A call
    # given the default config runs this one there.
    wide_default = {"BLOCK_M": 128, "BLOCK_N": 64, "num_warps": 8, "num_stages": 2}
    # the fastest configs at the other shapes of the H100 study (D = 64: 128-key blocks over three stages)
    tuning_seeds = ({"BLOCK_N": 128, "num_stages": 3}, wide_default, {"BLOCK_M": 64})

    def supports(self, call: Call) -> str | None:
        why = super().supports(call)
        if why:
            return why
        s = call.op.sizes(call)
        if s["d"] > 256:
            return f"head dim {s['d']} > 256 (one (BLOCK_M, head dim) tile of q and o lives in registers)"
        if call.device.type == "cuda" and call.dtype == torch.float32 and s["d"] > 128:
            return (f"float32 with head dim {s['d']} > 128: the default config's K and V tiles overflow "
                    "shared memory")
        if s["batch"] * s["heads"] > MAX_GRID_Y:
            return f"batch·heads = {s['batch'] * s['heads']} > {MAX_GRID_Y} (the grid's second dimension)"
        return None

    def run(self, call: Call, config: dict) -> tuple[torch.Tensor, torch.Tensor]:
        trivial = trivial_forward(call)
        if trivial is not None:
            return trivial
        q, k, v = (rows_contiguous(call.inputs[name]) for name in ("q", "k", "v"))
        (batch, heads, n_q, d), (_, kv_heads, n_k, _) = q.shape, k.shape
        o, lse = like(call, q), call.empty((batch, heads, n_q), torch.float32)
        mask, mask_strides, mask_bool = mask_args(call)
        block_d = head_block(d)
        tma = descriptors_apply(q, k, v, o)
        if config == self.config() and (not tma or block_d > 128):
            config = self.config(self.wide_default)
        block_m, block_n = config["BLOCK_M"], config["BLOCK_N"]
        descs = ((descriptor(q, block_m, block_d), descriptor(k, block_n, block_d), descriptor(v, block_n, block_d),
                  descriptor(o, block_m, block_d)) if tma else (q, k, v, o))
        grid = (triton.cdiv(n_q, block_m), batch * heads)
        launch(_attention_forward, grid, q, k, v, mask if mask is not None else q, o, lse, *descs,
               *q.stride()[:3], *k.stride()[:3], *v.stride()[:3], *o.stride()[:3], *mask_strides,
               heads, heads // kv_heads, n_q, n_k, d, call.params["scale"] * LOG2E,
               CAUSAL=call.params["causal"], HAS_MASK=mask is not None, MASK_BOOL=mask_bool,
               BLOCK_M=block_m, BLOCK_N=block_n, BLOCK_D=block_d, EVEN_D=block_d == d, TMA=tma,
               POS_SCALE=call.params["scale"] > 0, PRECISION=precision(q.dtype, block_d),
               num_warps=config["num_warps"], num_stages=config["num_stages"])
        return o, lse
