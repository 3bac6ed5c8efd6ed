"""scaled_matmul in Triton: a tiled tl.dot on the FP8 operands into a float32 accumulator, the scales and the bias
applied once in the epilogue, tiles in grouped order for L2 reuse.

Each program computes one BLOCK_M×BLOCK_N tile of the output, stepping over K by BLOCK_K; loads are masked past K,
and rows and columns past M and N wrap to real ones (their results are never stored), so any size works.
Operands are read through their strides: any layout runs, b column-major (torch._scaled_mm's) feeds the tensor
cores without a transpose. The products of two 8-bit floats are exact in float32, but Hopper's tensor cores add
them in an accumulator narrower than float32: every PROMOTE_K of K the kernel adds that partial sum into its float32
one (Triton's max_num_imprecise_acc), more often being more precise and slower; the tuner keeps the fastest that
still verifies.
"""

from __future__ import annotations

import functools

import torch
import triton
import triton.language as tl
from triton.runtime.errors import OutOfResources

from kernelzoo.backends.triton import TritonImplementation, cdiv, launcher
from kernelzoo.errors import UnsupportedError
from kernelzoo.registry import FP8, Call

from . import out_dtype, rowwise

# H100/H200: 227 KiB of shared memory per block (opt-in), 255 registers per thread, of which the float32
# accumulator may take half; a config beyond these does not compile, or spills.
MAX_SHARED_BYTES = 227 * 1024
MAX_ACCUMULATORS_PER_THREAD = 128


@triton.jit
def _scaled_matmul_kernel(a_ptr, b_ptr, c_ptr, scale_a_ptr, scale_b_ptr, bias_ptr, M, N, K,
                          stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn,
                          stride_scale_a, stride_scale_b, stride_bias,
                          ROW_SCALES: tl.constexpr, HAS_BIAS: tl.constexpr, BLOCK_M: tl.constexpr,
                          BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr,
                          PROMOTE_K: tl.constexpr):
    # Grouped order: GROUP_M row-tiles sweep the columns together, so the B tiles they share (and their A rows)
    # are still in L2 when the neighbours need them.
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
    # Rows and columns past M and N wrap to real ones (% M): their loads need no mask, and what they compute
    # lands in the output's tail, which is never stored.
    a_ptrs = a_ptr + (rows % M)[:, None] * stride_am + ks[None, :] * stride_ak
    b_ptrs = b_ptr + ks[:, None] * stride_bk + (cols % N)[None, :] * stride_bn
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        k_left = K - k0
        a = tl.load(a_ptrs, mask=ks[None, :] < k_left, other=0.0)
        b = tl.load(b_ptrs, mask=ks[:, None] < k_left, other=0.0)
        acc = tl.dot(a, b, acc, max_num_imprecise_acc=PROMOTE_K)
        a_ptrs += BLOCK_K * stride_ak
        b_ptrs += BLOCK_K * stride_bk
    # the scales multiply the sums, not every product: (a·sa) @ (b·sb) = sa·sb·(a @ b), per row and column
    if ROW_SCALES:
        scale_a = tl.load(scale_a_ptr + (rows % M) * stride_scale_a)
        scale_b = tl.load(scale_b_ptr + (cols % N) * stride_scale_b)
        acc = acc * scale_a[:, None] * scale_b[None, :]
    else:
        acc = acc * (tl.load(scale_a_ptr) * tl.load(scale_b_ptr))
    if HAS_BIAS:
        acc += tl.load(bias_ptr + (cols % N) * stride_bias).to(tl.float32)[None, :]
    c_ptrs = c_ptr + rows[:, None] * stride_cm + cols[None, :] * stride_cn
    tl.store(c_ptrs, acc.to(c_ptr.dtype.element_ty), mask=(rows[:, None] < M) & (cols[None, :] < N))


@functools.cache
def _capability(index: int) -> tuple[int, int]:
    return torch.cuda.get_device_capability(index)


class ScaledMatmulTriton(TritonImplementation):
    op = "scaled_matmul"
    dtypes = {"cuda": FP8, "cpu": FP8}  # a's dtype; the output's is out_dtype
    # Sizes that make sense on an H100 or H200; per call, a tile whose stages do not fit shared memory, or whose
    # accumulator would spill, is rejected. PROMOTE_K is in K elements, 32 a Hopper FP8 instruction's depth (a
    # value past BLOCK_K promotes once a step).
    config_space = {"BLOCK_M": [64, 128, 256], "BLOCK_N": [64, 128, 256], "BLOCK_K": [64, 128],
                    "GROUP_M": [8], "num_warps": [4, 8], "num_stages": [3, 4, 5], "PROMOTE_K": [32, 64, 128]}
    # Hopper's FP8 tile: 128×256 outputs (128 accumulators a thread over 8 warps), 128-deep steps of 48 KiB,
    # three in flight (144 KiB of shared memory); every instruction's sum promoted, the most precise
    default_config = {"BLOCK_M": 128, "BLOCK_N": 256, "BLOCK_K": 128, "GROUP_M": 8, "num_warps": 8,
                      "num_stages": 3, "PROMOTE_K": 32}

    def supports(self, call: Call) -> str | None:
        why = super().supports(call)
        if why is None and call.device.type == "cuda" and _capability(call.device.index) < (8, 9):
            return "Triton's 8-bit float dot needs a GPU of compute capability 8.9 or newer"
        return why

    def run(self, call: Call, config: dict) -> torch.Tensor:
        a, b = call.inputs["a"], call.inputs["b"]
        scale_a, scale_b, bias = call.inputs["scale_a"], call.inputs["scale_b"], call.inputs.get("bias")
        (m, k), n = a.shape, b.shape[1]
        out = call.empty((m, n), out_dtype(call))
        if out.numel() == 0:
            return out
        if call.device.type == "cuda":
            check_fits(config)
        row = rowwise(call)
        grid = (cdiv(m, config["BLOCK_M"]) * cdiv(n, config["BLOCK_N"]),)
        try:
            launcher(_scaled_matmul_kernel)[grid](
                a, b, out, scale_a, scale_b, bias if bias is not None else out, m, n, k,
                a.stride(0), a.stride(1), b.stride(0), b.stride(1), out.stride(0), out.stride(1),
                scale_a.stride(0) if row else 0, scale_b.stride(1) if row else 0,
                bias.stride(0) if bias is not None else 0,
                ROW_SCALES=row, HAS_BIAS=bias is not None, BLOCK_M=config["BLOCK_M"], BLOCK_N=config["BLOCK_N"],
                BLOCK_K=config["BLOCK_K"], GROUP_M=config["GROUP_M"],
                PROMOTE_K=min(config["PROMOTE_K"], config["BLOCK_K"]), num_warps=config["num_warps"],
                num_stages=config["num_stages"])
        except OutOfResources as exc:  # shared memory, or threads its register use leaves
            raise UnsupportedError(f"scaled_matmul/triton: {config} does not fit this GPU: {exc}") from None
        return out


def check_fits(config: dict) -> None:
    """Raise UnsupportedError unless ``config``'s stages fit shared memory and its accumulator the registers."""
    bm, bn, bk = config["BLOCK_M"], config["BLOCK_N"], config["BLOCK_K"]
    shared = config["num_stages"] * (bm * bk + bk * bn)  # one byte an element
    if shared > MAX_SHARED_BYTES:
        raise UnsupportedError(f"scaled_matmul/triton: {config} needs {shared // 1024} KiB of shared memory, more "
                               f"than the {MAX_SHARED_BYTES // 1024} KiB a block has")
    per_thread = bm * bn // (32 * config["num_warps"])
    if per_thread > MAX_ACCUMULATORS_PER_THREAD:
        raise UnsupportedError(f"scaled_matmul/triton: {config} gives each thread {per_thread} accumulators, more "
                               f"than {MAX_ACCUMULATORS_PER_THREAD} fit in registers")
