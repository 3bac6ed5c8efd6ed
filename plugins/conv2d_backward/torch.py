"""torch's own convolution backward (aten.convolution_backward: cuDNN on the GPU, oneDNN or its own
kernels on the CPU): the baseline. float32 on the GPU runs with cuDNN's TF32 off, as conv2d's does."""

from __future__ import annotations

import torch
from kernelzoo_plugins._gemm.conv import batched, ieee_float32

from kernelzoo.registry import FLOATS, Call, Implementation


class Conv2dBackwardTorch(Implementation):
    op = "conv2d_backward"
    plugin = "torch"
    # float32 only on the CPU: its float16 backward sums in float16 (grad_x off by up to 30 of its roundings
    # at 2×32×14×14), bfloat16 as conv2d's (±inf turned NaN)
    dtypes = {"cpu": (torch.float32,), "cuda": FLOATS}

    def run(self, call: Call, config: dict) -> tuple[torch.Tensor, ...]:
        g, x, w = call.inputs["grad_out"], call.inputs["x"], call.inputs["weight"]
        p = call.params
        with ieee_float32(call):
            gx, gw, gb = torch.ops.aten.convolution_backward(
                batched(g), batched(x), w, [w.shape[0]] if p["bias"] else None, list(p["stride"]),
                list(p["padding"]), list(p["dilation"]), False, [0, 0], 1, [True, True, p["bias"]])
        return (gx.view(x.shape), gw, gb) if p["bias"] else (gx.view(x.shape), gw)
