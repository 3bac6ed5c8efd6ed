"""linear's gradients in Triton: the two products on linear's strided gemm kernel, and the bias gradient
as a deterministic two-pass sum (``channel_sums``: per-split partials in float32, then the splits in order).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl
from kernelzoo_plugins.linear import rows
from kernelzoo_plugins.linear.triton import GemmTritonImplementation, gemm

from kernelzoo.backends.triton import launcher
from kernelzoo.registry import Call

from . import gradient_shapes

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
    per_split = triton.cdiv(max(inner, 1), splits)
    partial = torch.empty((splits, ch), dtype=torch.float32, device=x.device)
    grid = (triton.cdiv(ch, SUM_BLOCK_C), splits)
    launcher(channel_sums_kernel)[grid](x, partial, outer, ch, inner, *x.stride(), per_split,
                                        BLOCK_C=SUM_BLOCK_C, BLOCK_I=SUM_BLOCK_I)
    launcher(channel_sums_kernel)[(grid[0], 1)](partial, out, 1, ch, splits, 0, 1, ch, splits,
                                                BLOCK_C=SUM_BLOCK_C, BLOCK_I=SUM_BLOCK_I)


class LinearBackwardTriton(GemmTritonImplementation):
    op = "linear_backward"

    def run(self, call: Call, config: dict) -> tuple[torch.Tensor, ...]:
        g2, x2, w = rows(call.inputs["grad_out"]), rows(call.inputs["x"]), call.inputs["weight"]
        outs = tuple(call.empty(shape) for shape in gradient_shapes(call))
        gx, gw = rows(outs[0]), outs[1]
        if gx.numel():
            gemm(g2, w, gx, None, config)  # (M, N) · (N, K)
        if gw.numel():
            gemm(g2.t(), x2, gw, None, config)  # (N, M) · (M, K)
        if call.params["bias"]:
            channel_sums(g2.t().unsqueeze(0), outs[2])  # (1, N, M): columns of g
        return outs
