"""The spec in tensor ops: im2col by unfold, one float32 product with the weight matrix, plus the bias."""

from __future__ import annotations

import torch

from kernelzoo.backends.tensor_ops import PythonImplementation
from kernelzoo.registry import Call

from . import batched, conv_shape, output_shape


class Conv2dPython(PythonImplementation):
    op = "conv2d"

    def run(self, call: Call, config: dict) -> torch.Tensor:
        x, w, bias = batched(call.inputs["x"]).float(), call.inputs["weight"].float(), call.inputs.get("bias")
        cs, out = conv_shape(call), call.empty(output_shape(call))
        if out.numel() == 0:
            return out
        # (N, C·R·S, OH·OW): column l holds the C×R×S input patch that output pixel l sees (zeros in the padding)
        cols = torch.nn.functional.unfold(x, (cs.r, cs.s), dilation=cs.dilation, padding=cs.padding, stride=cs.stride)
        y = w.reshape(cs.k, -1) @ cols  # (N, K, OH·OW)
        if bias is not None:
            y = y + bias.float()[:, None]
        out.copy_(y.view(out.shape))
        return out
