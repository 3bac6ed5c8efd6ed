"""linear in Triton: a tiled tl.dot GEMM over strided operands with the bias fused into its epilogue.

Each program computes one BLOCK_M×BLOCK_N tile of C = A·B (+ bias per column), stepping over K by
BLOCK_K with a float32 accumulator; tiles go in grouped order for L2 reuse. Operands are read through
their strides, so y = x·wᵀ reads w as it is, and linear_backward's two products (g·w and gᵀ·x) use
the same kernel through ``gemm``. fp16/bf16 go to the tensor cores; float32 stays IEEE (no TF32).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from kernelzoo.backends.triton import TritonImplementation, launcher
from kernelzoo.errors import UnsupportedError
from kernelzoo.registry import Call

from . import rows

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
    grid = (triton.cdiv(m, config["BLOCK_M"]) * triton.cdiv(n, config["BLOCK_N"]),)
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


class LinearTriton(GemmTritonImplementation):
    op = "linear"

    def run(self, call: Call, config: dict) -> torch.Tensor:
        x, w, bias = call.inputs["x"], call.inputs["weight"], call.inputs.get("bias")
        out = call.empty((*x.shape[:-1], w.shape[0]))
        if out.numel() == 0:
            return out
        gemm(rows(x), w.t(), out.view(-1, w.shape[0]), bias, config)
        return out
