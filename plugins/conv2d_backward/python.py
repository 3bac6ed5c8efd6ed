"""The spec in tensor ops: im2col by unfold; grad_weight = grad_out · columnsᵀ summed over images,
grad_x = col2im (fold, which adds overlapping patches) of weightᵀ · grad_out; all in float32."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from kernelzoo_plugins._gemm.conv import batched, conv_shape

from kernelzoo.backends.tensor_ops import PythonImplementation
from kernelzoo.registry import Call

from . import gradient_shapes


class Conv2dBackwardPython(PythonImplementation):
    op = "conv2d_backward"

    def run(self, call: Call, config: dict) -> tuple[torch.Tensor, ...]:
        cs = conv_shape(call)
        outs = tuple(call.empty(shape) for shape in gradient_shapes(call))
        g = batched(call.inputs["grad_out"]).float().reshape(cs.n, cs.k, cs.oh * cs.ow)  # (N, K, L)
        x, w = batched(call.inputs["x"]).float(), call.inputs["weight"].float().reshape(cs.k, -1)  # w: (K, C·R·S)
        geometry = {"dilation": cs.dilation, "padding": cs.padding, "stride": cs.stride}
        cols = F.unfold(x, (cs.r, cs.s), **geometry)  # (N, C·R·S, L): the patch each output pixel sees
        grad_cols = w.t() @ g  # (N, C·R·S, L): each patch's gradient
        grads = [F.fold(grad_cols, (cs.h, cs.w), (cs.r, cs.s), **geometry),
                 (g @ cols.transpose(1, 2)).sum(0), g.sum((0, 2))]
        for out, grad in zip(outs, grads):
            out.copy_(grad.view(out.shape))
        return outs
