"""The spec in tensor ops: x̂ from the saved statistics, grad_x by the closed form, grad_weight and grad_bias
as sums over the rows, all in float32."""

from __future__ import annotations

import torch

from kernelzoo.backends.tensor_ops import PythonImplementation
from kernelzoo.registry import Call

from . import rows_of


class LayerNormBackwardPython(PythonImplementation):
    op = "layer_norm_backward"

    def run(self, call: Call, config: dict) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        dy2d, x2d, mean, rstd, n = rows_of(call)
        dtype, shape = call.dtype, call.params["normalized_shape"]
        dy = dy2d.float()  # (rows, n)
        xhat = (x2d.float() - mean[:, None]) * rstd[:, None]
        g = dy * call.inputs["weight"].float().reshape(1, n) if "weight" in call.inputs else dy
        dx = rstd[:, None] * (g - g.mean(1, keepdim=True) - xhat * (g * xhat).mean(1, keepdim=True))
        return (dx.to(dtype).reshape(call.inputs["x"].shape), (dy * xhat).sum(0).to(dtype).reshape(shape),
                dy.sum(0).to(dtype).reshape(shape))
