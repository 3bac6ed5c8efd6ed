"""The attention backward in Triton, FlashAttention-2's three kernels:

1. delta = rowsum(dO∘O), one program per (query block, batch·head);
2. dK and dV: one program per (block of BLOCK_OUTER keys, batch·kv head), looping over the query
   blocks (BLOCK_INNER rows) of every query head of its GQA group, so each program owns its rows
   of dK and dV (no atomics, and GQA's sum over the group is free);
3. dQ: one program per (block of BLOCK_OUTER query rows, batch·head), looping over key blocks of
   BLOCK_INNER.
Both 2 and 3 recompute P = exp2(S·scale·log2 e − lse·log2 e) from the forward's lse (rows that
attend no key have lse = -inf, read as +inf so that their P is 0) and dS = P∘(dP − delta). Like
the forward, each loop runs its blocks that need no mask without mask arithmetic, the causal
diagonal and the tails with it; causal programs skip the blocks they cannot see, and causal dQ
programs run longest first. Half floats on sm_90+ move through TMA descriptors, as in the forward. Separate dK/dV
and dQ passes recompute S twice but write every gradient once; a fused pass would need atomic
adds into dQ.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl
from kernelzoo_plugins._flash.triton import (
    LOG2E,
    MAX_GRID_Y,
    apply_mask,
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
from triton.tools.tensor_descriptor import TensorDescriptor

from kernelzoo.backends.triton import TritonImplementation, cdiv, interpreting
from kernelzoo.registry import Call

from . import gradients_like, trivial_backward


@triton.jit
def _delta(OUT, DO, DELTA, stride_ob, stride_oh, stride_om, stride_db, stride_dh, stride_dm, heads, n_q, head_dim,
           BLOCK: tl.constexpr, BLOCK_D: tl.constexpr):
    bh = tl.program_id(1)
    b = (bh // heads).to(tl.int64)
    h = (bh % heads).to(tl.int64)
    offs_m = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    offs_d = tl.arange(0, BLOCK_D)
    ok = (offs_m[:, None] < n_q) & (offs_d[None, :] < head_dim)
    o = tl.load(OUT + b * stride_ob + h * stride_oh + offs_m[:, None] * stride_om + offs_d[None, :], mask=ok, other=0.0)
    do = tl.load(DO + b * stride_db + h * stride_dh + offs_m[:, None] * stride_dm + offs_d[None, :], mask=ok,
                 other=0.0)
    delta = tl.sum(o.to(tl.float32) * do.to(tl.float32), 1)
    tl.store(DELTA + bh.to(tl.int64) * n_q + offs_m, delta, mask=offs_m < n_q)


@triton.jit
def _scores_t(k, q_ptrs, q_desc, b, h, start_m, mask_ptrs, lse_ptrs, offs_m, offs_n, offs_d, n_q, n_k, head_dim,
              qk_scale, stride_mm, MASKED: tl.constexpr, CAUSAL: tl.constexpr, HAS_MASK: tl.constexpr,
              MASK_BOOL: tl.constexpr, EVEN_D: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_D: tl.constexpr,
              TMA: tl.constexpr, PRECISION: tl.constexpr):
    """(q, Pᵀ) of one query block for the key block k: Pᵀ (keys × queries) = exp2(k·qᵀ·scale − lse)."""
    if TMA:
        q = q_desc.load([b, h, start_m, 0]).reshape(BLOCK_M, BLOCK_D)
    elif MASKED:
        if EVEN_D:
            q = tl.load(q_ptrs, mask=offs_m[:, None] < n_q, other=0.0)
        else:
            q = tl.load(q_ptrs, mask=(offs_m[:, None] < n_q) & (offs_d[None, :] < head_dim), other=0.0)
    elif EVEN_D:
        q = tl.load(q_ptrs)
    else:
        q = tl.load(q_ptrs, mask=offs_d[None, :] < head_dim, other=0.0)
    lse = tl.load(lse_ptrs, mask=offs_m < n_q, other=float("-inf"))
    lse2 = tl.where(lse == float("-inf"), float("inf"), lse * 1.4426950408889634)
    s_t = tl.dot(k, tl.trans(q), input_precision=PRECISION) * qk_scale  # (keys, queries), log2 units
    if HAS_MASK:
        bounds = (offs_m[None, :] < n_q) & (offs_n[:, None] < n_k)
        s_t = apply_mask(s_t, tl.load(mask_ptrs + offs_m[None, :] * stride_mm, mask=bounds, other=0), MASK_BOOL)
    if MASKED:
        keep = offs_m[None, :] < n_q
        if CAUSAL:
            keep = keep & (offs_n[:, None] <= offs_m[None, :])
        s_t = tl.where(keep, s_t, float("-inf"))
    return q, tl.exp2(s_t - lse2[None, :])


@triton.jit
def _dkdv_blocks(dk, dv, k, v, q_ptrs, do_ptrs, q_desc, do_desc, dq_ptrs, dq_desc, b, h, bh, mask_ptrs, lse_ptrs,
                 delta_ptrs, offs_n, offs_m0, offs_d, start, end, stride_qm, stride_dom, stride_mm, n_q, n_k, head_dim,
                 qk_scale, MASKED: tl.constexpr, CAUSAL: tl.constexpr, HAS_MASK: tl.constexpr,
                 MASK_BOOL: tl.constexpr, EVEN_D: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_D: tl.constexpr,
                 TMA: tl.constexpr, DQ_ATOMIC: tl.constexpr, DQ_TMA: tl.constexpr, PRECISION: tl.constexpr,
                 DESCEND: tl.constexpr):
    """Query blocks start..end into dK (unscaled) and dV of one key block; DQ_ATOMIC: each block's
    share of dQ (unscaled, dSᵀᵀ·K) added into the float32 rows at dq_ptrs (through dq_desc's bulk
    reduction when DQ_TMA; bh: the program's batch·head row of it). DESCEND: the blocks last first."""
    count = (end - start + BLOCK_M - 1) // BLOCK_M
    for i in range(0, count):
        start_m = start + (count - 1 - i) * BLOCK_M if DESCEND else start + i * BLOCK_M
        offs_m = start_m + offs_m0
        q, p_t = _scores_t(k, q_ptrs + start_m * stride_qm, q_desc, b, h, start_m, mask_ptrs, lse_ptrs + start_m,
                           offs_m, offs_n, offs_d, n_q, n_k, head_dim, qk_scale, stride_mm, MASKED, CAUSAL, HAS_MASK,
                           MASK_BOOL, EVEN_D, BLOCK_M, BLOCK_D, TMA, PRECISION)
        if TMA:
            do = do_desc.load([b, h, start_m, 0]).reshape(BLOCK_M, BLOCK_D)
        elif MASKED:
            if EVEN_D:
                do = tl.load(do_ptrs + start_m * stride_dom, mask=offs_m[:, None] < n_q, other=0.0)
            else:
                do = tl.load(do_ptrs + start_m * stride_dom,
                             mask=(offs_m[:, None] < n_q) & (offs_d[None, :] < head_dim), other=0.0)
        elif EVEN_D:
            do = tl.load(do_ptrs + start_m * stride_dom)
        else:
            do = tl.load(do_ptrs + start_m * stride_dom, mask=offs_d[None, :] < head_dim, other=0.0)
        dv = tl.dot(p_t.to(do.dtype), do, dv, input_precision=PRECISION)
        delta = tl.load(delta_ptrs + start_m + offs_m0, mask=offs_m < n_q, other=0.0)
        dp_t = tl.dot(v, tl.trans(do), input_precision=PRECISION)
        ds_t = (p_t * (dp_t - delta[None, :])).to(q.dtype)
        dk = tl.dot(ds_t, q, dk, input_precision=PRECISION)
        if DQ_ATOMIC:
            dq = tl.dot(tl.trans(ds_t), k, input_precision=PRECISION)  # (BLOCK_M, BLOCK_D)
            if DQ_TMA:
                dq_desc.atomic_add([bh, start_m, 0], dq.reshape(1, BLOCK_M, BLOCK_D))
            else:
                tl.atomic_add(dq_ptrs + start_m * BLOCK_D, dq, mask=offs_m[:, None] < n_q, sem="relaxed")
    return dk, dv


@triton.jit
def _attention_dkdv(Q, K, V, MASK, DO, LSE, DELTA, DK, DV, DQ_ACC, Q_DESC, K_DESC, V_DESC, DO_DESC, DK_DESC, DV_DESC,
                    DQ_ACC_DESC,
                    stride_qb, stride_qh, stride_qm, stride_kb, stride_kh, stride_kn, stride_vb, stride_vh, stride_vn,
                    stride_dob, stride_doh, stride_dom, stride_dkb, stride_dkh, stride_dkn,
                    stride_dvb, stride_dvh, stride_dvn, stride_mb, stride_mh, stride_mm, stride_mn,
                    heads, kv_heads, group, n_q, n_k, head_dim, qk_scale, scale,
                    CAUSAL: tl.constexpr, HAS_MASK: tl.constexpr, MASK_BOOL: tl.constexpr,
                    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr, EVEN_D: tl.constexpr,
                    TMA: tl.constexpr, DQ_ATOMIC: tl.constexpr, DQ_TMA: tl.constexpr, PRECISION: tl.constexpr):
    start_n = tl.program_id(0) * BLOCK_N
    bhk = tl.program_id(1)
    b32, hk32 = bhk // kv_heads, bhk % kv_heads  # descriptor coordinates are 32-bit
    b, hk = b32.to(tl.int64), hk32.to(tl.int64)
    offs_n = start_n + tl.arange(0, BLOCK_N)
    offs_m0 = tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, BLOCK_D)
    kv_ok = (offs_n[:, None] < n_k) & (offs_d[None, :] < head_dim)
    k = load_tile(K_DESC, K + b * stride_kb + hk * stride_kh + offs_n[:, None] * stride_kn + offs_d[None, :], kv_ok,
                  b32, hk32, start_n, BLOCK_N, BLOCK_D, TMA)
    v = load_tile(V_DESC, V + b * stride_vb + hk * stride_vh + offs_n[:, None] * stride_vn + offs_d[None, :], kv_ok,
                  b32, hk32, start_n, BLOCK_N, BLOCK_D, TMA)
    dk = tl.zeros((BLOCK_N, BLOCK_D), tl.float32)
    dv = tl.zeros((BLOCK_N, BLOCK_D), tl.float32)
    # Query blocks: [lo, mid) hold the causal diagonal (masked), [mid, full) are seen whole, then a
    # masked tail past the last whole block. Rows before start_n see none of these keys.
    full = (n_q // BLOCK_M) * BLOCK_M
    if CAUSAL:
        lo = (start_n // BLOCK_M) * BLOCK_M
        mid = tl.minimum(((start_n + BLOCK_N + BLOCK_M - 1) // BLOCK_M) * BLOCK_M, n_q)
    else:
        lo = 0
        mid = 0
    tail = tl.maximum(mid, full)
    # Each phase is a counted loop (over i, not over start_m from a run-time start): causal programs walk up, so
    # that every program of a head reads the same query block at once (through L2); non-causal ones walk down,
    # which the same measurement found faster for them (docs/design/flash-attention.md).
    for g in range(group):
        h32 = hk32 * group + g
        h = h32.to(tl.int64)
        q_ptrs = Q + b * stride_qb + h * stride_qh + offs_m0[:, None] * stride_qm + offs_d[None, :]
        do_ptrs = DO + b * stride_dob + h * stride_doh + offs_m0[:, None] * stride_dom + offs_d[None, :]
        mask_ptrs = MASK + b * stride_mb + h * stride_mh + offs_n[:, None] * stride_mn
        lse_ptrs = LSE + (b * heads + h) * n_q + offs_m0
        delta_ptrs = DELTA + (b * heads + h) * n_q
        bh = b32 * heads + h32
        dq_ptrs = DQ_ACC + bh.to(tl.int64) * n_q * BLOCK_D + offs_m0[:, None] * BLOCK_D + offs_d[None, :]
        dk, dv = _dkdv_blocks(dk, dv, k, v, q_ptrs, do_ptrs, Q_DESC, DO_DESC, dq_ptrs, DQ_ACC_DESC, b32, h32, bh,
                              mask_ptrs, lse_ptrs, delta_ptrs, offs_n, offs_m0, offs_d, lo, mid, stride_qm,
                              stride_dom, stride_mm, n_q, n_k, head_dim, qk_scale, True, CAUSAL, HAS_MASK,
                              MASK_BOOL, EVEN_D, BLOCK_M, BLOCK_D, TMA, DQ_ATOMIC, DQ_TMA, PRECISION, not CAUSAL)
        dk, dv = _dkdv_blocks(dk, dv, k, v, q_ptrs, do_ptrs, Q_DESC, DO_DESC, dq_ptrs, DQ_ACC_DESC, b32, h32, bh,
                              mask_ptrs, lse_ptrs, delta_ptrs, offs_n, offs_m0, offs_d, mid, full, stride_qm,
                              stride_dom, stride_mm, n_q, n_k, head_dim, qk_scale, False, CAUSAL, HAS_MASK,
                              MASK_BOOL, EVEN_D, BLOCK_M, BLOCK_D, TMA, DQ_ATOMIC, DQ_TMA, PRECISION, not CAUSAL)
        dk, dv = _dkdv_blocks(dk, dv, k, v, q_ptrs, do_ptrs, Q_DESC, DO_DESC, dq_ptrs, DQ_ACC_DESC, b32, h32, bh,
                              mask_ptrs, lse_ptrs, delta_ptrs, offs_n, offs_m0, offs_d, tail, n_q, stride_qm,
                              stride_dom, stride_mm, n_q, n_k, head_dim, qk_scale, True, CAUSAL, HAS_MASK,
                              MASK_BOOL, EVEN_D, BLOCK_M, BLOCK_D, TMA, DQ_ATOMIC, DQ_TMA, PRECISION, not CAUSAL)
    store_tile(DK_DESC, DK + b * stride_dkb + hk * stride_dkh + offs_n[:, None] * stride_dkn + offs_d[None, :], kv_ok,
               b32, hk32, start_n, (dk * scale).to(DK.dtype.element_ty), BLOCK_N, BLOCK_D, TMA)
    store_tile(DV_DESC, DV + b * stride_dvb + hk * stride_dvh + offs_n[:, None] * stride_dvn + offs_d[None, :], kv_ok,
               b32, hk32, start_n, dv.to(DV.dtype.element_ty), BLOCK_N, BLOCK_D, TMA)


@triton.jit
def _dq_blocks(dq, q, do, lse2, delta, k_ptrs, v_ptrs, k_desc, v_desc, b, hk, mask_ptrs, offs_m, offs_n0, offs_d,
               start, end, stride_kn, stride_vn, stride_mn, n_q, n_k, head_dim, qk_scale,
               MASKED: tl.constexpr, CAUSAL: tl.constexpr, HAS_MASK: tl.constexpr, MASK_BOOL: tl.constexpr,
               EVEN_D: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr, TMA: tl.constexpr,
               PRECISION: tl.constexpr):
    """Key blocks start..end into dQ (unscaled) of one query block."""
    for start_n in range(start, end, BLOCK_N):
        offs_n = start_n + offs_n0
        if TMA:
            k_t = k_desc.load([b, hk, start_n, 0]).reshape(BLOCK_N, BLOCK_D).T
            v_t = v_desc.load([b, hk, start_n, 0]).reshape(BLOCK_N, BLOCK_D).T
        elif MASKED:
            if EVEN_D:
                k_t = tl.load(k_ptrs + start_n * stride_kn, mask=offs_n[None, :] < n_k, other=0.0)
                v_t = tl.load(v_ptrs + start_n * stride_vn, mask=offs_n[None, :] < n_k, other=0.0)
            else:
                ok = (offs_n[None, :] < n_k) & (offs_d[:, None] < head_dim)
                k_t = tl.load(k_ptrs + start_n * stride_kn, mask=ok, other=0.0)
                v_t = tl.load(v_ptrs + start_n * stride_vn, mask=ok, other=0.0)
        elif EVEN_D:
            k_t = tl.load(k_ptrs + start_n * stride_kn)
            v_t = tl.load(v_ptrs + start_n * stride_vn)
        else:
            k_t = tl.load(k_ptrs + start_n * stride_kn, mask=offs_d[:, None] < head_dim, other=0.0)
            v_t = tl.load(v_ptrs + start_n * stride_vn, mask=offs_d[:, None] < head_dim, other=0.0)
        s = masked_scores(tl.dot(q, k_t, input_precision=PRECISION) * qk_scale, mask_ptrs, offs_m, offs_n, n_q, n_k,
                          stride_mn, MASKED, CAUSAL, HAS_MASK, MASK_BOOL)
        p = tl.exp2(s - lse2[:, None])
        dp = tl.dot(do, v_t, input_precision=PRECISION)
        ds = p * (dp - delta[:, None])
        dq = tl.dot(ds.to(k_t.dtype), tl.trans(k_t), dq, input_precision=PRECISION)
    return dq


@triton.jit
def _attention_dq(Q, K, V, MASK, DO, LSE, DELTA, DQ, Q_DESC, K_DESC, V_DESC, DO_DESC, DQ_DESC,
                  stride_qb, stride_qh, stride_qm, stride_kb, stride_kh, stride_kn, stride_vb, stride_vh, stride_vn,
                  stride_dob, stride_doh, stride_dom, stride_dqb, stride_dqh, stride_dqm,
                  stride_mb, stride_mh, stride_mm, stride_mn,
                  heads, group, n_q, n_k, head_dim, qk_scale, scale,
                  CAUSAL: tl.constexpr, HAS_MASK: tl.constexpr, MASK_BOOL: tl.constexpr,
                  BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr, EVEN_D: tl.constexpr,
                  TMA: tl.constexpr, PRECISION: tl.constexpr):
    # causal: the last query blocks see the most keys; they launch first, so the grid ends on short ones
    m_block = tl.num_programs(0) - 1 - tl.program_id(0) if CAUSAL else tl.program_id(0)
    start_m = m_block * BLOCK_M
    bh = tl.program_id(1)
    b32, h32 = bh // heads, bh % heads  # descriptor coordinates are 32-bit
    hk32 = h32 // group
    b, h, hk = b32.to(tl.int64), h32.to(tl.int64), hk32.to(tl.int64)
    offs_m = start_m + tl.arange(0, BLOCK_M)
    offs_n0 = tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, BLOCK_D)
    row_ok = offs_m < n_q
    ok = row_ok[:, None] & (offs_d[None, :] < head_dim)
    q = load_tile(Q_DESC, Q + b * stride_qb + h * stride_qh + offs_m[:, None] * stride_qm + offs_d[None, :], ok,
                  b32, h32, start_m, BLOCK_M, BLOCK_D, TMA)
    do = load_tile(DO_DESC, DO + b * stride_dob + h * stride_doh + offs_m[:, None] * stride_dom + offs_d[None, :], ok,
                   b32, h32, start_m, BLOCK_M, BLOCK_D, TMA)
    lse = tl.load(LSE + (b * heads + h) * n_q + offs_m, mask=row_ok, other=float("-inf"))
    lse2 = tl.where(lse == float("-inf"), float("inf"), lse * 1.4426950408889634)
    delta = tl.load(DELTA + (b * heads + h) * n_q + offs_m, mask=row_ok, other=0.0)
    k_ptrs = K + b * stride_kb + hk * stride_kh + offs_n0[None, :] * stride_kn + offs_d[:, None]  # Kᵀ tile
    v_ptrs = V + b * stride_vb + hk * stride_vh + offs_n0[None, :] * stride_vn + offs_d[:, None]  # Vᵀ tile
    mask_ptrs = MASK + b * stride_mb + h * stride_mh + offs_m[:, None] * stride_mm
    dq = tl.zeros((BLOCK_M, BLOCK_D), tl.float32)
    full_end = (n_k // BLOCK_N) * BLOCK_N
    if CAUSAL:
        full_end = tl.minimum(full_end, (start_m // BLOCK_N) * BLOCK_N)
        end = tl.minimum(n_k, start_m + BLOCK_M)
    else:
        end = n_k
    dq = _dq_blocks(dq, q, do, lse2, delta, k_ptrs, v_ptrs, K_DESC, V_DESC, b32, hk32, mask_ptrs, offs_m, offs_n0,
                    offs_d, 0, full_end, stride_kn, stride_vn, stride_mn, n_q, n_k, head_dim, qk_scale,
                    False, CAUSAL, HAS_MASK, MASK_BOOL, EVEN_D, BLOCK_N, BLOCK_D, TMA, PRECISION)
    dq = _dq_blocks(dq, q, do, lse2, delta, k_ptrs, v_ptrs, K_DESC, V_DESC, b32, hk32, mask_ptrs, offs_m, offs_n0,
                    offs_d, full_end, end, stride_kn, stride_vn, stride_mn, n_q, n_k, head_dim, qk_scale,
                    True, CAUSAL, HAS_MASK, MASK_BOOL, EVEN_D, BLOCK_N, BLOCK_D, TMA, PRECISION)
    store_tile(DQ_DESC, DQ + b * stride_dqb + h * stride_dqh + offs_m[:, None] * stride_dqm + offs_d[None, :], ok,
               b32, h32, start_m, (dq * scale).to(DQ.dtype.element_ty), BLOCK_M, BLOCK_D, TMA)


@triton.jit
def _dq_convert(ACC, DQ, stride_dqb, stride_dqh, stride_dqm, heads, n_q, head_dim, scale,
                BLOCK: tl.constexpr, BLOCK_D: tl.constexpr):
    """dQ = scale · the float32 sums of the atomic dK/dV pass, in dQ's dtype and strides."""
    bh = tl.program_id(1)
    b = (bh // heads).to(tl.int64)
    h = (bh % heads).to(tl.int64)
    offs_m = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    offs_d = tl.arange(0, BLOCK_D)
    rows = offs_m[:, None] < n_q
    acc = tl.load(ACC + bh.to(tl.int64) * n_q * BLOCK_D + offs_m[:, None] * BLOCK_D + offs_d[None, :], mask=rows,
                  other=0.0)
    tl.store(DQ + b * stride_dqb + h * stride_dqh + offs_m[:, None] * stride_dqm + offs_d[None, :],
             (acc * scale).to(DQ.dtype.element_ty), mask=rows & (offs_d[None, :] < head_dim))


class AttentionBackwardTriton(TritonImplementation):
    op = "attention_backward"
    # BLOCK_OUTER: the keys (dK/dV) or query rows (dQ) a program owns; BLOCK_INNER: the step of its loop
    # DQ: "pass", a dQ pass of its own (7 products per pair of blocks, deterministic); "atomic", dQ's
    # share added by the dK/dV pass into float32 rows (5 products, order of the additions unspecified)
    config_space = {"BLOCK_OUTER": [64, 128], "BLOCK_INNER": [32, 64], "num_warps": [4, 8],
                    "num_stages": [1, 2, 3, 4], "DQ": ["pass", "atomic"]}
    # the tuner's winner at the float16 D = 64 keys, and faster than large_tile_default at D = 128 too
    default_config = {"BLOCK_OUTER": 128, "BLOCK_INNER": 64, "num_warps": 8, "num_stages": 3, "DQ": "pass"}
    # The default above overflows shared memory with float32 tiles (twice the bytes) at D >= 80 or with a
    # mask, and with half ones at D = 256. Such a call given the default runs the previous
    # default, which fits them all.
    large_tile_default = {"BLOCK_OUTER": 128, "BLOCK_INNER": 32, "num_warps": 8, "num_stages": 2, "DQ": "pass"}
    # the fastest configs of a sweep (docs/design/flash-attention.md): 64/64 over 4 warps at every
    # non-causal shape and, with atomic dQ, at causal D = 64; 64/32 over 3 stages at causal N = 4096
    tuning_seeds = ({"BLOCK_OUTER": 64, "num_warps": 4, "num_stages": 2},
                    {"BLOCK_OUTER": 64, "num_warps": 4, "num_stages": 2, "DQ": "atomic"},
                    {"BLOCK_OUTER": 64, "BLOCK_INNER": 32, "num_warps": 4, "num_stages": 3},
                    {"num_stages": 2})

    def supports(self, call: Call) -> str | None:
        why = super().supports(call)
        if why:
            return why
        s = call.op.sizes(call)
        if s["d"] > 256:
            return f"head dim {s['d']} > 256 (a (BLOCK_OUTER, head dim) tile of dK, dV or dQ lives in registers)"
        if call.device.type == "cuda" and call.dtype == torch.float32 and s["d"] > 128:
            return (f"float32 with head dim {s['d']} > 128: the default config's tiles overflow shared memory")
        if s["batch"] * s["heads"] > MAX_GRID_Y:
            return f"batch·heads = {s['batch'] * s['heads']} > {MAX_GRID_Y} (the grid's second dimension)"
        return None

    def run(self, call: Call, config: dict) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        trivial = trivial_backward(call)
        if trivial is not None:
            return trivial
        if config == self.config() and (call.dtype == torch.float32 or call.inputs["q"].shape[-1] > 128):
            config = self.config(self.large_tile_default)
        q, k, v, o, do = (rows_contiguous(call.inputs[name]) for name in ("q", "k", "v", "o", "do"))
        lse = call.inputs["lse"].contiguous()
        (batch, heads, n_q, d), (_, kv_heads, n_k, _) = q.shape, k.shape
        dq, dk, dv = gradients_like(call)
        delta = torch.empty((batch, heads, n_q), dtype=torch.float32, device=q.device)
        mask, mask_strides, mask_bool = mask_args(call)
        mask_arg = mask if mask is not None else q
        block_d, outer, inner = head_block(d), config["BLOCK_OUTER"], config["BLOCK_INNER"]
        tma = descriptors_apply(q, k, v, do, dq, dk, dv)
        flags = {"CAUSAL": call.params["causal"], "HAS_MASK": mask is not None, "MASK_BOOL": mask_bool,
                 "BLOCK_D": block_d, "EVEN_D": block_d == d, "TMA": tma, "PRECISION": precision(q.dtype, block_d),
                 "num_warps": config["num_warps"], "num_stages": config["num_stages"]}

        def descs(*tiles: tuple[torch.Tensor, int]) -> tuple:
            return tuple(descriptor(t, rows, block_d) if tma else t for t, rows in tiles)

        qk_scale, scale = call.params["scale"] * LOG2E, call.params["scale"]
        atomic = config["DQ"] == "atomic"
        # the float32 sums of dQ, rows padded to block_d; the interpreter has no bulk reduction, so there
        # the adds go through pointers
        dq_acc = torch.zeros((batch * heads, n_q, block_d), dtype=torch.float32, device=q.device) if atomic else dq
        dq_tma = atomic and tma and not interpreting()
        dq_acc_desc = (TensorDescriptor(dq_acc, list(dq_acc.shape), list(dq_acc.stride()), [1, inner, block_d])
                       if dq_tma else dq_acc)
        # every argument is ready before the first launch, so that the kernels follow each other on the GPU
        # without waiting for the host in between
        dkdv_tiles = descs((q, inner), (k, outer), (v, outer), (do, inner), (dk, outer), (dv, outer))
        dq_tiles = () if atomic else descs((q, outer), (k, inner), (v, inner), (do, outer), (dq, outer))
        launch(_delta, (cdiv(n_q, 64), batch * heads), o, do, delta, *o.stride()[:3], *do.stride()[:3],
               heads, n_q, d, BLOCK=64, BLOCK_D=block_d)
        launch(_attention_dkdv, (cdiv(n_k, outer), batch * kv_heads), q, k, v, mask_arg, do, lse, delta, dk, dv,
               dq_acc, *dkdv_tiles, dq_acc_desc,
               *q.stride()[:3], *k.stride()[:3], *v.stride()[:3], *do.stride()[:3], *dk.stride()[:3],
               *dv.stride()[:3], *mask_strides, heads, kv_heads, heads // kv_heads, n_q, n_k, d, qk_scale, scale,
               BLOCK_M=inner, BLOCK_N=outer, DQ_ATOMIC=atomic, DQ_TMA=dq_tma, **flags)
        if atomic:
            launch(_dq_convert, (cdiv(n_q, 64), batch * heads), dq_acc, dq, *dq.stride()[:3], heads, n_q, d,
                   scale, BLOCK=64, BLOCK_D=block_d)
            return dq, dk, dv
        launch(_attention_dq, (cdiv(n_q, outer), batch * heads), q, k, v, mask_arg, do, lse, delta, dq,
               *dq_tiles, *q.stride()[:3], *k.stride()[:3], *v.stride()[:3], *do.stride()[:3], *dq.stride()[:3],
               *mask_strides, heads, heads // kv_heads, n_q, n_k, d, qk_scale, scale,
               BLOCK_M=outer, BLOCK_N=inner, **flags)
        return dq, dk, dv
