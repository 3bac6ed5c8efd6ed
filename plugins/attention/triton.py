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

8-bit float (FP8) q, k, v: S = Q·Kᵀ multiplies the 8-bit floats on tensor cores, q_descale·k_descale folded
into the scale (log2 units) and v_descale into the final normalisation. PV_FP8 chooses P·V's precision:
1 rounds P to V's 8-bit float and multiplies in FP8 (the fused-attention tutorial's fast path; here at most a few
percent faster than 0, and P's 3 or 2 mantissa bits cost far more than the op's tolerance allows,
docs/design/flash-attention.md). Hopper's 8-bit products take both operands K-major,
so V is then read through its transpose (B, Hk, D, Nk), copied once per call unless v already lies that way (a
transposed view of such a tensor). 0 rounds P to float16 and multiplies it with V converted to float16 once per
call (exactly: both 8-bit formats are subsets of float16), read as the 16-bit kernels read it. Half-float and
float32 calls take PV_FP8 0 alone (1 is unsupported for them).

On sm_90 and newer, half-float and FP8 q, k, v (V's transpose) and o move through TMA tensor
descriptors: the copy engine fills shared memory straight from global memory, zero-filling rows past
N and columns past the head dim, and drops the stores there. Same tiles on the H100 at D = 128: 500-526 TFLOP/s against
308-315 through pointers (docs/design/flash-attention.md). Other calls load through pointers.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl
from kernelzoo_plugins._flash.fp8 import descale_views, is_fp8, output_dtype, trivial_output
from kernelzoo_plugins._flash.spec import like
from kernelzoo_plugins._flash.triton import (
    LOG2E,
    MAX_GRID_Y,
    descriptor,
    descriptors_apply,
    head_block,
    launch,
    load_tile,
    mask_args,
    masked_scores,
    precision,
    rows_contiguous,
    store_tile,
)

from kernelzoo.backends.triton import TritonImplementation, cdiv, interpreting
from kernelzoo.errors import UnsupportedError
from kernelzoo.registry import FLOATS, FP8, Call

LN2 = 0.6931471805599453


@triton.jit
def _round_float32(x, MANTISSA: tl.constexpr, MIN_EXP: tl.constexpr):
    """x rounded (to nearest, ties to even) to a float of MANTISSA bits whose normal numbers start at 2^MIN_EXP,
    in float32. Triton's interpreter converts float32 to bfloat16 by truncation and to 8-bit floats wrongly
    where rounding carries into the exponent (0.49 gives 0.25 in e4m3); it converts what this returns exactly,
    as a GPU's conversions round."""
    e = tl.maximum(tl.floor(tl.log2(tl.maximum(tl.abs(x), 1e-38))), MIN_EXP)
    magic = tl.exp2(e - MANTISSA) * 12582912.0  # 1.5·2^23 quanta: adding it rounds x to a multiple of the quantum
    return (x + magic) - magic


@triton.jit
def _forward_blocks(acc, l_i, m_i, q, k_ptrs, v_ptrs, k_desc, v_desc, b, hk, mask_ptrs, offs_m, offs_n, offs_d,
                    start, end, stride_kn, stride_vn, stride_mn, n_q, n_k, head_dim, qk_scale,
                    MASKED: tl.constexpr, CAUSAL: tl.constexpr, HAS_MASK: tl.constexpr, MASK_BOOL: tl.constexpr,
                    EVEN_D: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr, TMA: tl.constexpr,
                    POS_SCALE: tl.constexpr, PRECISION: tl.constexpr, FP8: tl.constexpr, PV_FP8: tl.constexpr,
                    EMULATE_ROUNDING: tl.constexpr):
    """Key blocks start..end of one program's rows into (acc, l_i, m_i). MASKED: apply the key
    bound and the causal mask (else every key of these blocks is seen by every row). TMA: K and V
    come through the descriptors k_desc and v_desc (b, hk: the program's batch and kv head). FP8 and
    PV_FP8: v_ptrs and v_desc address V's transpose (its rows are head dims, stride_vn apart)."""
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
        if FP8 and PV_FP8:
            if TMA:
                v = v_desc.load([b, hk, 0, start_n]).reshape(BLOCK_D, BLOCK_N).T
            elif MASKED:
                v = tl.load(v_ptrs + start_n, mask=(cols < n_k)[None, :] & (offs_d[:, None] < head_dim),
                            other=0.0).T
            else:
                v = tl.load(v_ptrs + start_n, mask=offs_d[:, None] < head_dim, other=0.0).T
        elif TMA:
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
        if not FP8:
            acc = tl.dot(p.to(v.dtype), v, acc * alpha[:, None], input_precision=PRECISION)  # accumulates in place
        elif PV_FP8:
            if EMULATE_ROUNDING:
                p = _round_float32(p, 3, -6) if v.dtype == tl.float8e4nv else _round_float32(p, 2, -14)
            acc = tl.dot(p.to(v.dtype), v, acc * alpha[:, None])
        else:  # V in float16 already
            acc = tl.dot(p.to(tl.float16), v, acc * alpha[:, None])
        m_i = m_new
    return acc, l_i, m_i


@triton.jit
def _attention_forward(Q, K, V, MASK, OUT, LSE, Q_DESC, K_DESC, V_DESC, O_DESC,
                       stride_qb, stride_qh, stride_qm, stride_kb, stride_kh, stride_kn,
                       stride_vb, stride_vh, stride_vn, stride_ob, stride_oh, stride_om,
                       stride_mb, stride_mh, stride_mm, stride_mn,
                       heads, group, n_q, n_k, head_dim, qk_scale,
                       QD, KD, VD, stride_qdb, stride_qdh, stride_kdb, stride_kdh, stride_vdb, stride_vdh,
                       CAUSAL: tl.constexpr, HAS_MASK: tl.constexpr, MASK_BOOL: tl.constexpr,
                       BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr,
                       EVEN_D: tl.constexpr, TMA: tl.constexpr, POS_SCALE: tl.constexpr, PRECISION: tl.constexpr,
                       FP8: tl.constexpr, PV_FP8: tl.constexpr, EMULATE_ROUNDING: tl.constexpr):
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
    if FP8 and PV_FP8:  # V's transpose (B, Hk, D, Nk): a (BLOCK_D, BLOCK_N) tile, keys contiguous
        v_ptrs = V + b * stride_vb + hk * stride_vh + offs_d[:, None] * stride_vn + offs_n[None, :]
    else:
        v_ptrs = V + b * stride_vb + hk * stride_vh + offs_n[:, None] * stride_vn + offs_d[None, :]
    if FP8:
        # the dequantization: q's and k's factors scale every score, v's every output
        qk_scale = qk_scale * tl.load(QD + b * stride_qdb + hk * stride_qdh) * tl.load(KD + b * stride_kdb
                                                                                       + hk * stride_kdh)
        v_scale = tl.load(VD + b * stride_vdb + hk * stride_vdh)
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
                                    POS_SCALE, PRECISION, FP8, PV_FP8, EMULATE_ROUNDING)
    acc, l_i, m_i = _forward_blocks(acc, l_i, m_i, q, k_ptrs, v_ptrs, K_DESC, V_DESC, b32, hk32, mask_ptrs, offs_m,
                                    offs_n, offs_d, full_end, end, stride_kn, stride_vn, stride_mn, n_q, n_k, head_dim,
                                    qk_scale, True, CAUSAL, HAS_MASK, MASK_BOOL, EVEN_D, BLOCK_N, BLOCK_D, TMA,
                                    POS_SCALE, PRECISION, FP8, PV_FP8, EMULATE_ROUNDING)
    # Rows that saw no key: l = 0, acc = 0; o = 0 and lse = -inf.
    l_safe = tl.where(l_i == 0.0, 1.0, l_i)
    o = acc * (v_scale / l_safe)[:, None] if FP8 else acc / l_safe[:, None]
    if EMULATE_ROUNDING and OUT.dtype.element_ty == tl.bfloat16:
        o = _round_float32(o, 7, -126)
    lse = (m_i + tl.log2(l_i)) * 0.6931471805599453
    store_tile(O_DESC, OUT + b * stride_ob + h * stride_oh + offs_m[:, None] * stride_om + offs_d[None, :], ok,
               b32, h32, start_m, o.to(OUT.dtype.element_ty), BLOCK_M, BLOCK_D, TMA)
    tl.store(LSE + (b * heads + h) * n_q + offs_m, lse, mask=row_ok)


class AttentionTriton(TritonImplementation):
    op = "attention"
    dtypes = {"cuda": FLOATS + FP8, "cpu": (torch.float32, *FP8)}
    # PV_FP8 (FP8 inputs only): 1 multiplies P·V in FP8, 0 with P in float16 (see the module's docstring)
    config_space = {"BLOCK_M": [32, 64, 128], "BLOCK_N": [32, 64, 128], "num_warps": [4, 8],
                    "num_stages": [1, 2, 3, 4], "PV_FP8": [0, 1]}
    # TMA loads (half floats, sm_90): one warpgroup owns 128 query rows, faster than 8 warps at D = 128
    # (docs/design/flash-attention.md)
    default_config = {"BLOCK_M": 128, "BLOCK_N": 64, "num_warps": 4, "num_stages": 2, "PV_FP8": 0}
    # The default of pointer loads and of head dims past 128, where a 128-row accumulator over 4 warps
    # would spill: two stages of 64 × 256 half K and V tiles and q fit in an H100's 228 KiB. A call
    # given the default config runs this one there.
    wide_default = {"BLOCK_M": 128, "BLOCK_N": 64, "num_warps": 8, "num_stages": 2}
    # the fastest configs at the other benchmark shapes (D = 64: 128-key blocks over three stages)
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
        fp8 = is_fp8(call)
        if config.get("PV_FP8") and not fp8:
            raise UnsupportedError(f"{self.key}: PV_FP8 1 is for 8-bit float inputs, not {call.dtype}")
        trivial = trivial_output(call)
        if trivial is not None:
            return trivial
        q, k, v = (rows_contiguous(call.inputs[name]) for name in ("q", "k", "v"))
        (batch, heads, n_q, d), (_, kv_heads, n_k, _) = q.shape, k.shape
        o, lse = like(call, q, output_dtype(call)), call.empty((batch, heads, n_q), torch.float32)
        mask, mask_strides, mask_bool = mask_args(call)
        block_d = head_block(d)
        pv_fp8 = fp8 and bool(config.get("PV_FP8"))
        if fp8:
            block_d = max(32, block_d)  # an 8-bit tensor-core product is at least 32 deep
            # P·V in FP8 reads V's transpose (B, Hk, D, Nk); in float16, V converted once (exactly)
            v = keys_contiguous(call.inputs["v"]) if pv_fp8 else v.to(torch.float16).contiguous()
            descales = descale_views(call)
        else:  # None: constexprs the 16-bit kernels are compiled without
            descales = (None, None, None)
        # descriptors_apply asks its first tensor's dtype: o's 16 bits stand for an FP8 call
        tma = descriptors_apply(o, q, k, v) if fp8 else descriptors_apply(q, k, v, o)
        if config == self.config() and (not tma or block_d > 128):
            config = self.config(self.wide_default)
        block_m, block_n = config["BLOCK_M"], config["BLOCK_N"]
        descs = ((descriptor(q, block_m, block_d), descriptor(k, block_n, block_d),
                  descriptor(v, block_d, block_n) if pv_fp8 else descriptor(v, block_n, block_d),
                  descriptor(o, block_m, block_d)) if tma else (q, k, v, o))
        grid = (cdiv(n_q, block_m), batch * heads)
        launch(_attention_forward, grid, q, k, v, mask if mask is not None else q, o, lse, *descs,
               *q.stride()[:3], *k.stride()[:3], *v.stride()[:3], *o.stride()[:3], *mask_strides,
               heads, heads // kv_heads, n_q, n_k, d, call.params["scale"] * LOG2E,
               *descales, *(st for t in descales for st in (t.stride()[:2] if t is not None else (None, None))),
               CAUSAL=call.params["causal"], HAS_MASK=mask is not None, MASK_BOOL=mask_bool,
               BLOCK_M=block_m, BLOCK_N=block_n, BLOCK_D=block_d, EVEN_D=block_d == d, TMA=tma,
               # descales of either sign fold into the scale: the max of the scaled scores is taken after scaling
               POS_SCALE=call.params["scale"] > 0 and not fp8, PRECISION=precision(q.dtype, block_d),
               FP8=fp8, PV_FP8=pv_fp8, EMULATE_ROUNDING=interpreting(),
               num_warps=config["num_warps"], num_stages=config["num_stages"])
        return o, lse


def keys_contiguous(v: torch.Tensor) -> torch.Tensor:
    """V's transpose (B, Hk, D, Nk) with the keys contiguous and every other stride a multiple of 16 bytes (what the
    8-bit P·V product reads K-major, through a descriptor where it can): v's own memory where it lies that way,
    else a copy."""
    vt = v.transpose(2, 3)
    if vt.stride(-1) == 1 and all(st % 16 == 0 for st in vt.stride()[:-1]) and vt.data_ptr() % 16 == 0:
        return vt
    b, h, n, d = v.shape
    out = v.new_empty((b, h, d, -(-n // 16) * 16))[..., :n]
    out.copy_(vt)
    return out
