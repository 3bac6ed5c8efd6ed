"""matmul in Triton: the tiled tl.dot kernel, tiles in grouped order for L2 reuse, batch on grid axis 1.

Each program computes one BLOCK_M×BLOCK_N tile of C in a float32 accumulator, stepping over K by
BLOCK_K; loads are masked past K, rows and columns past M and N wrap to real ones (their results
are never stored), so any size works. fp16/bf16 go to the tensor cores through tl.dot, float32
stays IEEE float32 (no TF32). Operands are read through their strides: transposed or sliced views
need no copy, a broadcast batch has stride 0.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl
from triton.runtime.errors import OutOfResources

from kernelzoo.backends.triton import TritonImplementation, cdiv, launcher
from kernelzoo.errors import UnsupportedError
from kernelzoo.registry import Call

from . import batched, output_shape

# 255 registers per thread, of which the float32 accumulator may take half: more spills. (Shared
# memory needs no estimate: Triton says when a config needs more than the device has.)
MAX_ACCUMULATORS_PER_THREAD = 128
MAX_GRID_Y = 65535


@triton.jit
def _matmul_kernel(a_ptr, b_ptr, c_ptr, M, N, K,
                   stride_ab, stride_am, stride_ak, stride_bb, stride_bk, stride_bn,
                   stride_cb, stride_cm, stride_cn,
                   BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                   GROUP_M: tl.constexpr, PRECISION: tl.constexpr):
    # Grouped order: GROUP_M row-tiles sweep the columns together, so the B tiles they share
    # (and their A rows) are still in L2 when the neighbours need them.
    pid = tl.program_id(0)
    tiles_m = tl.cdiv(M, BLOCK_M)
    tiles_n = tl.cdiv(N, BLOCK_N)
    per_group = GROUP_M * tiles_n
    first_m = (pid // per_group) * GROUP_M
    group_m = min(tiles_m - first_m, GROUP_M)
    pid_m = first_m + (pid % per_group) % group_m
    pid_n = (pid % per_group) // group_m
    batch = tl.program_id(1).to(tl.int64)

    rows = pid_m.to(tl.int64) * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = pid_n.to(tl.int64) * BLOCK_N + tl.arange(0, BLOCK_N)
    ks = tl.arange(0, BLOCK_K)
    # Rows and columns past M and N wrap to real ones (% M): the loads need no mask there, and
    # what those rows compute lands in C's tail, which is never stored.
    a_ptrs = a_ptr + batch * stride_ab + (rows % M)[:, None] * stride_am + ks[None, :] * stride_ak
    b_ptrs = b_ptr + batch * stride_bb + ks[:, None] * stride_bk + (cols % N)[None, :] * stride_bn
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        k_left = K - k0
        # zeros past K on both sides: 0·0 adds nothing (a real value times 0 could be inf·0 = NaN)
        a = tl.load(a_ptrs, mask=ks[None, :] < k_left, other=0.0)
        b = tl.load(b_ptrs, mask=ks[:, None] < k_left, other=0.0)
        acc = tl.dot(a, b, acc, input_precision=PRECISION)
        a_ptrs += BLOCK_K * stride_ak
        b_ptrs += BLOCK_K * stride_bk
    c_ptrs = c_ptr + batch * stride_cb + rows[:, None] * stride_cm + cols[None, :] * stride_cn
    tl.store(c_ptrs, acc.to(c_ptr.dtype.element_ty), mask=(rows[:, None] < M) & (cols[None, :] < N))


class MatmulTriton(TritonImplementation):
    op = "matmul"
    # Sizes that make sense on an H100. Per call, a tile whose accumulator would spill, or whose
    # stages do not fit shared memory (float32 tiles take twice the bytes), is rejected.
    config_space = {"BLOCK_M": [64, 128, 256], "BLOCK_N": [64, 128, 256], "BLOCK_K": [32, 64],
                    "GROUP_M": [8], "num_warps": [4, 8], "num_stages": [3, 4]}
    # fits every dtype (96 KiB of shared memory at fp16, 144 KiB at float32, measured on sm_90 with
    # Triton 3.6; an A100 has 163 KiB) and 128 accumulators a thread
    default_config = {"BLOCK_M": 128, "BLOCK_N": 256, "BLOCK_K": 32, "GROUP_M": 8,
                      "num_warps": 8, "num_stages": 4}

    def run(self, call: Call, config: dict) -> torch.Tensor:
        a3, b3, batch = batched(call)
        out = call.empty(output_shape(call))
        if out.numel() == 0:
            return out
        if call.device.type == "cuda":
            self._check_fits(config, batch)
        c3 = out if out.dim() == 3 else out.unsqueeze(0)
        (_, m, k), n = a3.shape, b3.shape[-1]
        grid = (cdiv(m, config["BLOCK_M"]) * cdiv(n, config["BLOCK_N"]), batch)
        try:
            launcher(_matmul_kernel)[grid](
                a3, b3, c3, m, n, k,
                a3.stride(0) if a3.shape[0] > 1 else 0, a3.stride(1), a3.stride(2),
                b3.stride(0) if b3.shape[0] > 1 else 0, b3.stride(1), b3.stride(2),
                c3.stride(0), c3.stride(1), c3.stride(2),
                BLOCK_M=config["BLOCK_M"], BLOCK_N=config["BLOCK_N"], BLOCK_K=config["BLOCK_K"],
                GROUP_M=config["GROUP_M"], PRECISION="ieee" if call.dtype == torch.float32 else "tf32",
                num_warps=config["num_warps"], num_stages=config["num_stages"])
        except OutOfResources as exc:  # shared memory, or threads its register use leaves
            raise UnsupportedError(f"matmul/triton: {config} does not fit this GPU for {call.dtype}: {exc}") from None
        return out

    @staticmethod
    def _check_fits(config: dict, batch: int) -> None:
        per_thread = config["BLOCK_M"] * config["BLOCK_N"] // (32 * config["num_warps"])
        if per_thread > MAX_ACCUMULATORS_PER_THREAD:
            raise UnsupportedError(f"matmul/triton: {config} gives each thread {per_thread} accumulators, "
                                   f"more than {MAX_ACCUMULATORS_PER_THREAD} fit in registers")
        if batch > MAX_GRID_Y:
            raise UnsupportedError(f"matmul/triton: batch {batch} exceeds the grid's {MAX_GRID_Y} on axis 1")
