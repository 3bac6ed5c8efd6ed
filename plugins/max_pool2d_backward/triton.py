"""max_pool2d's gradient in Triton as a gather: one program per BLOCK input elements, each visiting the
at most ceil(kh/sh)·ceil(kw/sw) windows that contain it, in output order, and adding the gradient of
those whose index is it (float32). No atomics: deterministic, and overlapping windows need no care."""

from __future__ import annotations

import torch
import triton
import triton.language as tl
from kernelzoo_plugins._gemm.conv import batched
from kernelzoo_plugins._reduce.pool_triton import nchw_block

from kernelzoo.backends.triton import TritonImplementation, cdiv, launcher
from kernelzoo.registry import Call


@triton.jit
def max_pool_backward_kernel(g_ptr, idx_ptr, gx_ptr, TOTAL, C, H, W, OH, OW, KH, KW, sh, sw, ph, pw,
                             sgn, sgc, sgh, sgw, BLOCK: tl.constexpr):
    e, ok, n, c, ih, iw = nchw_block(TOTAL, C, H, W, BLOCK)
    # windows oh with oh·sh − ph <= ih < oh·sh − ph + kh: oh from ceil((ih + ph − kh + 1) / sh) to (ih + ph) / sh
    top = ih + ph - KH + 1
    oh0 = tl.where(top > 0, (top + sh - 1) // sh, 0)
    oh1 = tl.minimum((ih + ph) // sh, OH - 1)
    left = iw + pw - KW + 1
    ow0 = tl.where(left > 0, (left + sw - 1) // sw, 0)
    ow1 = tl.minimum((iw + pw) // sw, OW - 1)
    here = ih * W + iw
    base = n * sgn + c * sgc
    acc = tl.zeros((BLOCK,), dtype=tl.float32)
    for a in range(0, (KH + sh - 1) // sh):
        for b in range(0, (KW + sw - 1) // sw):
            oh = oh0 + a
            ow = ow0 + b
            inside = ok & (oh <= oh1) & (ow <= ow1)
            at = base + oh * sgh + ow * sgw
            took = tl.load(idx_ptr + at, mask=inside, other=-1) == here
            acc += tl.load(g_ptr + at, mask=inside & took, other=0.0).to(tl.float32)
    tl.store(gx_ptr + e, acc.to(gx_ptr.dtype.element_ty), mask=ok)


class MaxPool2dBackwardTriton(TritonImplementation):
    op = "max_pool2d_backward"
    config_space = {"BLOCK": [128, 256, 512, 1024], "num_warps": [2, 4, 8]}
    default_config = {"BLOCK": 512, "num_warps": 4}

    def run(self, call: Call, config: dict) -> torch.Tensor:
        p = call.params
        out = call.empty(p["input_shape"])
        total = out.numel()
        if total:
            # one set of strides for both: grad_out and indices contiguous
            g, indices = batched(call.inputs["grad_out"]).contiguous(), batched(call.inputs["indices"]).contiguous()
            (_, c, oh, ow), (h, w) = g.shape, p["input_shape"][-2:]
            launcher(max_pool_backward_kernel)[(cdiv(total, config["BLOCK"]),)](
                g, indices, out, total, c, h, w, oh, ow, *p["kernel_size"], *p["stride"], *p["padding"], *g.stride(),
                BLOCK=config["BLOCK"], num_warps=config["num_warps"])
        return out
