"""The spec in tensor ops: 0 where y <= 0 (relu clipped it), else grad; NaN y passes grad through."""

from __future__ import annotations

import torch

from kernelzoo.backends.tensor_ops import PythonImplementation
from kernelzoo.registry import Call


class ReluBackwardPython(PythonImplementation):
    op = "relu_backward"

    def run(self, call: Call, config: dict) -> torch.Tensor:
        grad, y = call.inputs["grad"], call.inputs["y"]
        return torch.where(y <= 0, 0.0, grad)
