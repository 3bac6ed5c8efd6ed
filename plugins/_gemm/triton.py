"""The GEMM family's Triton kernel: a tiled tl.dot GEMM over strided operands with an optional bias fused into
its epilogue (linear, linear_backward and conv2d_backward's products), the launch of it and the checks of a config."""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from kernelzoo.backends.triton import TritonImplementation, cdiv, launcher
from kernelzoo.errors import UnsupportedError

# H100: 227 KiB of shared memory per block (opt-in), 255 registers per thread, of which the
# accumulator may take half; a config beyond these does not compile, or spills.
MAX_SHARED_BYTES = 227 * 1024
MAX_ACCUMULATORS_PER_THREAD = 128


@triton.jit
def gemm_kernel(a_ptr, b_ptr, c_ptr, bias_ptr, M, N, K, stride_am, stride_ak, stride_bk, stride_bn,
                stride_cm, stride_cn, HAS_BIAS: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr, PRECISION: tl.constexpr):
    # Grouped order: GROUP_M row-tiles sweep the columns together, so the B tiles they share are
    # still in L2 when the neighbours need them.
    pid = tl.program_id(0)
    tiles_n = tl.cdiv(N, BLOCK_N)
    per_group = GROUP_M * tiles_n
    first_m = (pid // per_group) * GROUP_M
    group_m = min(tl.cdiv(M, BLOCK_M) - first_m, GROUP_M)
    pid_m = first_m + (pid % per_group) % group_m
    pid_n = (pid % per_group) // group_m

    rows = pid_m.to(tl.int64) * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = pid_n.to(tl.int64) * BLOCK_N + tl.arange(0, BLOCK_N)
    ks = tl.arange(0, BLOCK_K)
    # Rows and columns past M and N wrap to real ones (% M): their loads need no mask, and what they
    # compute lands in C's tail, which is never stored.
    a_ptrs = a_ptr + (rows % M)[:, None] * stride_am + ks[None, :] * stride_ak
    b_ptrs = b_ptr + ks[:, None] * stride_bk + (cols % N)[None, :] * stride_bn
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        k_left = K - k0
        # zeros past K on both sides: 0·0 adds nothing (a real value times 0 could be inf·0 = NaN)
        a = tl.load(a_ptrs, mask=ks[None, :] < k_left, other=0.0)
        b = tl.load(b_ptrs, mask=ks[:, None] < k_left, other=0.0)
        acc = tl.dot(a, b, acc, input_precision=PRECISION)
        a_ptrs += BLOCK_K * stride_ak
        b_ptrs += BLOCK_K * stride_bk
    if HAS_BIAS:
        acc += tl.load(bias_ptr + cols, mask=cols < N, other=0.0).to(tl.float32)[None, :]
    c_ptrs = c_ptr + rows[:, None] * stride_cm + cols[None, :] * stride_cn
    tl.store(c_ptrs, acc.to(c_ptr.dtype.element_ty), mask=(rows[:, None] < M) & (cols[None, :] < N))


def gemm(a: torch.Tensor, b: torch.Tensor, c: torch.Tensor, bias: torch.Tensor | None, config: dict) -> None:
    """c (M×N) = a (M×K) · b (K×N) (+ bias per column), any strides; c must not be empty."""
    (m, k), n = a.shape, b.shape[1]
    if a.is_cuda:
        check_fits(a.element_size(), config)
    bias = bias.contiguous() if bias is not None else None
    grid = (cdiv(m, config["BLOCK_M"]) * cdiv(n, config["BLOCK_N"]),)
    launcher(gemm_kernel)[grid](
        a, b, c, bias if bias is not None else c, m, n, k, a.stride(0), a.stride(1), b.stride(0), b.stride(1),
        c.stride(0), c.stride(1), HAS_BIAS=bias is not None, BLOCK_M=config["BLOCK_M"],
        BLOCK_N=config["BLOCK_N"], BLOCK_K=config["BLOCK_K"], GROUP_M=config["GROUP_M"],
        PRECISION="ieee" if a.dtype == torch.float32 else "tf32", num_warps=config["num_warps"],
        num_stages=config["num_stages"])


def check_fits(element_size: int, config: dict) -> None:
    """Raise UnsupportedError unless ``config``'s stages fit shared memory and its accumulator the registers."""
    bm, bn, bk = config["BLOCK_M"], config["BLOCK_N"], config["BLOCK_K"]
    shared = config["num_stages"] * (bm * bk + bk * bn) * element_size
    if shared > MAX_SHARED_BYTES:
        raise UnsupportedError(f"triton gemm: {config} needs {shared // 1024} KiB of shared memory at "
                               f"{element_size} bytes an element, more than the {MAX_SHARED_BYTES // 1024} KiB "
                               "a block has")
    per_thread = bm * bn // (32 * config["num_warps"])
    if per_thread > MAX_ACCUMULATORS_PER_THREAD:
        raise UnsupportedError(f"triton gemm: {config} gives each thread {per_thread} accumulators, more than "
                               f"{MAX_ACCUMULATORS_PER_THREAD} fit in registers")


class GemmTritonImplementation(TritonImplementation):
    """A triton plugin built on ``gemm``: its config space."""

    config_space = {"BLOCK_M": [64, 128, 256], "BLOCK_N": [64, 128, 256], "BLOCK_K": [32, 64],
                    "GROUP_M": [8], "num_warps": [4, 8], "num_stages": [3, 4]}
    # fits every dtype: 98 KiB of shared memory at fp16, 196 KiB at fp32; 128 accumulators a thread
    default_config = {"BLOCK_M": 128, "BLOCK_N": 256, "BLOCK_K": 32, "GROUP_M": 8, "num_warps": 8,
                      "num_stages": 4}


# Blocks of the sums: a 32-channel × 128-element tile per step; a split reads at least SPLIT_ELEMENTS
# elements of each channel, so a long reduction spreads over many programs (enough for 132 SMs).
SUM_BLOCK_C, SUM_BLOCK_I, SPLIT_ELEMENTS = 32, 128, 4096


@triton.jit
def channel_sums_kernel(x_ptr, out_ptr, OUTER, CH, INNER, stride_o, stride_c, stride_i, per_split,
                        BLOCK_C: tl.constexpr, BLOCK_I: tl.constexpr):
    # out[split, c] = Σ_o Σ_{i in the split's range} x[o, c, i], in a fixed order (float32 sums, stored
    # in out's dtype)
    cs = tl.program_id(0) * BLOCK_C + tl.arange(0, BLOCK_C)
    split = tl.program_id(1)
    i_begin = split * per_split
    i_end = tl.minimum(INNER, i_begin + per_split)
    acc = tl.zeros((BLOCK_C, BLOCK_I), dtype=tl.float32)
    plane_ptr = x_ptr  # advances by stride_o: pointer arithmetic stays 64-bit
    for _ in range(0, OUTER):
        for i0 in range(i_begin, i_end, BLOCK_I):
            i = i0 + tl.arange(0, BLOCK_I)
            ptrs = plane_ptr + cs[:, None].to(tl.int64) * stride_c + i[None, :].to(tl.int64) * stride_i
            acc += tl.load(ptrs, mask=(cs[:, None] < CH) & (i[None, :] < i_end), other=0.0).to(tl.float32)
        plane_ptr += stride_o
    tl.store(out_ptr + split * CH + cs, tl.sum(acc, axis=1).to(out_ptr.dtype.element_ty), mask=cs < CH)


def channel_sums(x: torch.Tensor, out: torch.Tensor) -> None:
    """out[c] = Σ_{o, i} x[o, c, i] for a 3-D view x (any strides): float32 partials over splits of i, then
    their sum in split order, cast to out's dtype. Deterministic."""
    outer, ch, inner = x.shape
    if ch == 0:
        return
    splits = max(1, min(1024, inner // SPLIT_ELEMENTS))
    per_split = cdiv(max(inner, 1), splits)
    partial = torch.empty((splits, ch), dtype=torch.float32, device=x.device)
    grid = (cdiv(ch, SUM_BLOCK_C), splits)
    launcher(channel_sums_kernel)[grid](x, partial, outer, ch, inner, *x.stride(), per_split,
                                        BLOCK_C=SUM_BLOCK_C, BLOCK_I=SUM_BLOCK_I)
    launcher(channel_sums_kernel)[(grid[0], 1)](partial, out, 1, ch, splits, 0, 1, ch, splits,
                                                BLOCK_C=SUM_BLOCK_C, BLOCK_I=SUM_BLOCK_I)
