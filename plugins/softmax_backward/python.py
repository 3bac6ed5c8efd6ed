"""The spec in tensor ops: grad_x = y · (grad − Σ grad · y) along dim, in float32."""

from __future__ import annotations

import torch

from kernelzoo.backends.tensor_ops import PythonImplementation
from kernelzoo.registry import Call


class SoftmaxBackwardPython(PythonImplementation):
    op = "softmax_backward"

    def run(self, call: Call, config: dict) -> torch.Tensor:
        g, y, dim = call.inputs["grad"].float(), call.inputs["y"].float(), call.params["dim"]
        return (y * (g - (g * y).sum(dim, keepdim=True))).to(call.dtype)
