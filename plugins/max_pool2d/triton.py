"""max_pool2d in Triton: one program per BLOCK outputs (flattened over N·C·OH·OW), each scanning its
window clipped to the image in torch's order (greater than the best so far, or NaN, is taken). x is
read through its strides: channels-last or sliced inputs need no copy."""

from __future__ import annotations

import torch
import triton
import triton.language as tl
from kernelzoo_plugins._gemm.conv import batched
from kernelzoo_plugins._reduce.pool_triton import nchw_block

from kernelzoo.backends.triton import TritonImplementation, cdiv, launcher
from kernelzoo.registry import Call

from . import index_output, pooled_shape


@triton.jit
def max_pool_kernel(x_ptr, out_ptr, idx_ptr, TOTAL, C, H, W, OH, OW, KH, KW, sh, sw, ph, pw,
                    sxn, sxc, sxh, sxw, BLOCK: tl.constexpr):
    o, ok, n, c, oh, ow = nchw_block(TOTAL, C, OH, OW, BLOCK)
    h0 = oh * sh - ph
    w0 = ow * sw - pw
    plane = x_ptr + n * sxn + c * sxc
    best = tl.full((BLOCK,), float("-inf"), tl.float32)
    at = tl.maximum(h0, 0) * W + tl.maximum(w0, 0)  # a window of −inf gives its first in-image element
    for i in range(0, KH):
        for j in range(0, KW):
            y = h0 + i
            x = w0 + j
            inside = ok & (y >= 0) & (y < H) & (x >= 0) & (x < W)
            v = tl.load(plane + y * sxh + x * sxw, mask=inside, other=float("-inf")).to(tl.float32)
            take = inside & ((v > best) | (v != v))
            best = tl.where(take, v, best)
            at = tl.where(take, y * W + x, at)
    tl.store(out_ptr + o, best.to(out_ptr.dtype.element_ty), mask=ok)
    tl.store(idx_ptr + o, at, mask=ok)


class MaxPool2dTriton(TritonImplementation):
    op = "max_pool2d"
    config_space = {"BLOCK": [128, 256, 512, 1024], "num_warps": [2, 4, 8]}
    default_config = {"BLOCK": 512, "num_warps": 4}

    def run(self, call: Call, config: dict) -> tuple[torch.Tensor, torch.Tensor]:
        x = batched(call.inputs["x"])
        shape = pooled_shape(call.inputs["x"].shape, call.params)
        out, indices = call.empty(shape), index_output(call, shape)
        total = out.numel()
        if total:
            (_, c, h, w), (oh, ow) = x.shape, shape[-2:]
            launcher(max_pool_kernel)[(cdiv(total, config["BLOCK"]),)](
                x, out, indices, total, c, h, w, oh, ow, *call.params["kernel_size"], *call.params["stride"],
                *call.params["padding"], *x.stride(), BLOCK=config["BLOCK"], num_warps=config["num_warps"])
        return out, indices
