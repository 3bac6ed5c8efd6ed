"""add in Triton: one program per BLOCK output elements. Dense same-shape inputs take a plain
vectorisable kernel; others a strided one that turns each output index into coordinates over
the merged layout (up to MAX_DIMS dimensions, broadcast ones at stride 0), in 32-bit
arithmetic when the output has fewer than 2**31 elements (64-bit division costs several times
more), with 64-bit offsets into the inputs.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from kernelzoo.backends.triton import TritonImplementation, cdiv, launcher
from kernelzoo.registry import Call

from . import MAX_DIMS, dense_inputs, layout


@triton.jit
def _add_contiguous_kernel(a_ptr, b_ptr, out_ptr, n, alpha, BLOCK: tl.constexpr):
    offsets = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    a = tl.load(a_ptr + offsets, mask=mask).to(tl.float32)
    b = tl.load(b_ptr + offsets, mask=mask).to(tl.float32)
    tl.store(out_ptr + offsets, (a + b * alpha).to(out_ptr.dtype.element_ty), mask=mask)


@triton.jit
def _coordinate(index, offset_a, offset_b, size, stride_a, stride_b):
    """Peel the innermost remaining dimension off ``index``; add its offsets."""
    coord = index % size
    return index // size, offset_a + coord.to(tl.int64) * stride_a, offset_b + coord.to(tl.int64) * stride_b


@triton.jit
def _add_strided_kernel(a_ptr, b_ptr, out_ptr, n, alpha,
                        size0, size1, size2, size3, size4, size5,
                        stride_a0, stride_a1, stride_a2, stride_a3, stride_a4, stride_a5,
                        stride_b0, stride_b1, stride_b2, stride_b3, stride_b4, stride_b5,
                        NDIM: tl.constexpr, WIDE: tl.constexpr, BLOCK: tl.constexpr):
    # dimension 0 is the innermost; dimensions NDIM and above do not exist
    if WIDE:
        index = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    else:
        index = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = index < n
    rest = index
    offset_a = tl.zeros([BLOCK], dtype=tl.int64)
    offset_b = tl.zeros([BLOCK], dtype=tl.int64)
    rest, offset_a, offset_b = _coordinate(rest, offset_a, offset_b, size0, stride_a0, stride_b0)
    if NDIM > 1:
        rest, offset_a, offset_b = _coordinate(rest, offset_a, offset_b, size1, stride_a1, stride_b1)
    if NDIM > 2:
        rest, offset_a, offset_b = _coordinate(rest, offset_a, offset_b, size2, stride_a2, stride_b2)
    if NDIM > 3:
        rest, offset_a, offset_b = _coordinate(rest, offset_a, offset_b, size3, stride_a3, stride_b3)
    if NDIM > 4:
        rest, offset_a, offset_b = _coordinate(rest, offset_a, offset_b, size4, stride_a4, stride_b4)
    if NDIM > 5:
        rest, offset_a, offset_b = _coordinate(rest, offset_a, offset_b, size5, stride_a5, stride_b5)
    a = tl.load(a_ptr + offset_a, mask=mask).to(tl.float32)
    b = tl.load(b_ptr + offset_b, mask=mask).to(tl.float32)
    tl.store(out_ptr + index, (a + b * alpha).to(out_ptr.dtype.element_ty), mask=mask)


class AddTriton(TritonImplementation):
    op = "add"
    config_space = {"BLOCK": [512, 1024, 2048, 4096, 8192], "num_warps": [2, 4, 8, 16]}
    default_config = {"BLOCK": 2048, "num_warps": 8}

    def run(self, call: Call, config: dict) -> torch.Tensor:
        a, b = call.inputs["a"], call.inputs["b"]
        plan = layout(a, b)
        if len(plan.sizes) > MAX_DIMS:
            a, b = dense_inputs(call)
            plan = layout(a, b)
        out = call.empty(torch.broadcast_shapes(a.shape, b.shape))
        n, alpha, block = out.numel(), call.params["alpha"], config["BLOCK"]
        if n == 0:
            return out
        grid = (cdiv(n, block),)
        if plan.contiguous:
            launcher(_add_contiguous_kernel)[grid](a, b, out, n, alpha, BLOCK=block, num_warps=config["num_warps"])
            return out
        pad = MAX_DIMS - len(plan.sizes)  # innermost first, padded with unit dimensions
        sizes = [*reversed(plan.sizes), *[1] * pad]
        a_strides = [*reversed(plan.a_strides), *[0] * pad]
        b_strides = [*reversed(plan.b_strides), *[0] * pad]
        launcher(_add_strided_kernel)[grid](a, b, out, n, alpha, *sizes, *a_strides, *b_strides, NDIM=len(plan.sizes),
                                            WIDE=n + block >= 2**31, BLOCK=block, num_warps=config["num_warps"])
        return out
