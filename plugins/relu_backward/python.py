"""The spec in tensor ops: 0 where y <= 0 (relu clipped it), else grad; NaN y passes grad through."""

from __future__ import annotations

import torch

from kernelzoo.registry import FLOATS, Call, Implementation


class ReluBackwardPython(Implementation):
    op = "relu_backward"
    plugin = "python"
    dtypes = {"cpu": FLOATS, "cuda": FLOATS}

    def run(self, call: Call, config: dict) -> torch.Tensor:
        grad, y = call.inputs["grad"], call.inputs["y"]
        return torch.where(y <= 0, 0.0, grad)
