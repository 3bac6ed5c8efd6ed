"""Triton kernels shared by the binary elementwise ops and copy_, and the binary ops' wrapper base.

One program per BLOCK output elements. Dense same-shape operands take plain vectorisable
kernels; others strided ones that turn each output index into coordinates over the merged
layout (kernelzoo.elementwise.layout: up to MAX_DIMS dimensions, broadcast ones at stride 0),
in 32-bit arithmetic when there are fewer than 2**31 elements (64-bit division costs several
times more), with 64-bit offsets into the operands.

The binary kernels take the expression as ``OP: tl.constexpr``, the op's ``kernel_name`` (its
name, or with its variant: "gelu_backward_tanh"), so each op compiles its own kernel with
only its expression in it. Inputs are computed in float32 and rounded once to the output.
"""

from __future__ import annotations

import math

import torch
import triton
import triton.language as tl

from kernelzoo.backends.triton import TritonImplementation, cdiv, launcher
from kernelzoo.elementwise import MAX_DIMS, Layout, binary_plan
from kernelzoo.registry import Call

# (constants go right of a tensor: constexpr * tensor is no tensor in the interpreter)
_SQRT_HALF = tl.constexpr(math.sqrt(0.5))
_INV_SQRT_2PI = tl.constexpr(1.0 / math.sqrt(2.0 * math.pi))
_SQRT_2_OVER_PI = tl.constexpr(math.sqrt(2.0 / math.pi))
_KAPPA = tl.constexpr(0.044715)
_THREE_KAPPA = tl.constexpr(3.0 * 0.044715)


@triton.jit
def _gelu_backward_none(grad, x):
    cdf = 0.5 * (1.0 + tl.math.erf(x * _SQRT_HALF))
    pdf = tl.exp(x * x * -0.5) * _INV_SQRT_2PI
    return grad * (cdf + x * pdf)


@triton.jit
def _gelu_backward_tanh(grad, x):
    # With t = tanh(u): (1 + t) / 2 = r or e·r and 1 - t² = 4·e·r², where e = exp(-2|u|) and
    # r = 1 / (1 + e) (r for u >= 0, e·r for u < 0). No tanh is needed (tl.math of Triton 3.6 and
    # the interpreter have none) and 1 - t² keeps its relative precision where t rounds to ±1.
    # x = ±inf gives NaN, as torch's formula: u = ±inf, e = 0, then inf·0.
    u = (x + x * x * x * _KAPPA) * _SQRT_2_OVER_PI
    e = tl.exp(tl.abs(u) * -2.0)
    r = 1.0 / (1.0 + e)
    half_one_plus_t = tl.where(u >= 0, r, e * r)
    du = (1.0 + x * x * _THREE_KAPPA) * _SQRT_2_OVER_PI
    return grad * (half_one_plus_t + 2.0 * x * e * r * r * du)


@triton.jit
def _binary(a, b, OP: tl.constexpr):
    """The expression OP of two float32 tensors."""
    if OP == "mul":
        out = a * b
    elif OP == "div":
        out = tl.div_rn(a, b)  # IEEE division: `/` is div.full.f32 on the GPU, 2 ulp
    elif OP == "relu_backward":
        out = tl.where(b <= 0.0, 0.0, a)  # a = grad, b = y; y NaN keeps grad, as torch's threshold_backward
    elif OP == "gelu_backward_none":
        out = _gelu_backward_none(a, b)
    else:
        tl.static_assert(OP == "gelu_backward_tanh", "unknown binary expression")
        out = _gelu_backward_tanh(a, b)
    return out


@triton.jit
def binary_dense_kernel(a_ptr, b_ptr, out_ptr, n, OP: tl.constexpr, BLOCK: tl.constexpr):
    offsets = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    a = tl.load(a_ptr + offsets, mask=mask).to(tl.float32)
    b = tl.load(b_ptr + offsets, mask=mask).to(tl.float32)
    tl.store(out_ptr + offsets, _binary(a, b, OP).to(out_ptr.dtype.element_ty), mask=mask)


@triton.jit
def _coordinate(index, offset0, offset1, size, stride0, stride1):
    """Peel the innermost remaining dimension off ``index``; add its offsets."""
    coord = index % size
    return index // size, offset0 + coord.to(tl.int64) * stride0, offset1 + coord.to(tl.int64) * stride1


@triton.jit
def _index_and_offsets(n, size0, size1, size2, size3, size4, size5,
                       stride0_0, stride0_1, stride0_2, stride0_3, stride0_4, stride0_5,
                       stride1_0, stride1_1, stride1_2, stride1_3, stride1_4, stride1_5,
                       NDIM: tl.constexpr, WIDE: tl.constexpr, BLOCK: tl.constexpr):
    """This program's element indices, their mask, and their offsets in operands 0 and 1 of the
    layout (dimension 0 is the innermost; dimensions NDIM and above do not exist)."""
    if WIDE:
        index = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    else:
        index = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    rest = index
    offset0 = tl.zeros([BLOCK], dtype=tl.int64)
    offset1 = tl.zeros([BLOCK], dtype=tl.int64)
    rest, offset0, offset1 = _coordinate(rest, offset0, offset1, size0, stride0_0, stride1_0)
    if NDIM > 1:
        rest, offset0, offset1 = _coordinate(rest, offset0, offset1, size1, stride0_1, stride1_1)
    if NDIM > 2:
        rest, offset0, offset1 = _coordinate(rest, offset0, offset1, size2, stride0_2, stride1_2)
    if NDIM > 3:
        rest, offset0, offset1 = _coordinate(rest, offset0, offset1, size3, stride0_3, stride1_3)
    if NDIM > 4:
        rest, offset0, offset1 = _coordinate(rest, offset0, offset1, size4, stride0_4, stride1_4)
    if NDIM > 5:
        rest, offset0, offset1 = _coordinate(rest, offset0, offset1, size5, stride0_5, stride1_5)
    return index, index < n, offset0, offset1


@triton.jit
def binary_strided_kernel(a_ptr, b_ptr, out_ptr, n,
                          size0, size1, size2, size3, size4, size5,
                          stride_a0, stride_a1, stride_a2, stride_a3, stride_a4, stride_a5,
                          stride_b0, stride_b1, stride_b2, stride_b3, stride_b4, stride_b5,
                          OP: tl.constexpr, NDIM: tl.constexpr, WIDE: tl.constexpr, BLOCK: tl.constexpr):
    index, mask, offset_a, offset_b = _index_and_offsets(
        n, size0, size1, size2, size3, size4, size5, stride_a0, stride_a1, stride_a2, stride_a3, stride_a4,
        stride_a5, stride_b0, stride_b1, stride_b2, stride_b3, stride_b4, stride_b5, NDIM, WIDE, BLOCK)
    a = tl.load(a_ptr + offset_a, mask=mask).to(tl.float32)
    b = tl.load(b_ptr + offset_b, mask=mask).to(tl.float32)
    tl.store(out_ptr + index, _binary(a, b, OP).to(out_ptr.dtype.element_ty), mask=mask)


@triton.jit
def copy_dense_kernel(dst_ptr, src_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    tl.store(dst_ptr + offsets, tl.load(src_ptr + offsets, mask=mask), mask=mask)


@triton.jit
def copy_strided_kernel(dst_ptr, src_ptr, n,
                        size0, size1, size2, size3, size4, size5,
                        stride_dst0, stride_dst1, stride_dst2, stride_dst3, stride_dst4, stride_dst5,
                        stride_src0, stride_src1, stride_src2, stride_src3, stride_src4, stride_src5,
                        NDIM: tl.constexpr, WIDE: tl.constexpr, BLOCK: tl.constexpr):
    _, mask, offset_dst, offset_src = _index_and_offsets(
        n, size0, size1, size2, size3, size4, size5, stride_dst0, stride_dst1, stride_dst2, stride_dst3,
        stride_dst4, stride_dst5, stride_src0, stride_src1, stride_src2, stride_src3, stride_src4, stride_src5,
        NDIM, WIDE, BLOCK)
    tl.store(dst_ptr + offset_dst, tl.load(src_ptr + offset_src, mask=mask), mask=mask)


def layout_args(plan: Layout) -> list[int]:
    """The strided kernels' sizes and both operands' strides, innermost dimension first, each padded
    to MAX_DIMS (unit dimensions, stride 0)."""
    pad = MAX_DIMS - len(plan.sizes)
    return [*reversed(plan.sizes), *[1] * pad, *reversed(plan.a_strides), *[0] * pad,
            *reversed(plan.b_strides), *[0] * pad]


def wide(n: int, block: int) -> bool:
    """Whether indices (up to the last program's end) need 64 bits."""
    return n + block >= 2**31


class BinaryTriton(TritonImplementation):
    """Base of the binary ops' triton plugins: the shared kernels with the op's expression."""

    config_space = {"BLOCK": [512, 1024, 2048, 4096, 8192], "num_warps": [2, 4, 8, 16]}
    default_config = {"BLOCK": 2048, "num_warps": 8}

    def run(self, call: Call, config: dict) -> torch.Tensor:
        a, b, plan, out = binary_plan(call)
        n, block, op = out.numel(), config["BLOCK"], call.op.kernel_name(call)
        if n == 0:
            return out
        grid = (cdiv(n, block),)
        if plan.contiguous:
            launcher(binary_dense_kernel)[grid](a, b, out, n, OP=op, BLOCK=block, num_warps=config["num_warps"])
            return out
        launcher(binary_strided_kernel)[grid](a, b, out, n, *layout_args(plan), OP=op, NDIM=len(plan.sizes),
                                              WIDE=wide(n, block), BLOCK=block, num_warps=config["num_warps"])
        return out
