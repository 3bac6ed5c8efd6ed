"""torch's threshold_backward(grad, y, 0) (what torch.relu's autograd runs): the baseline."""

from __future__ import annotations

import torch

from kernelzoo.registry import FLOATS, Call, Implementation


class ReluBackwardTorch(Implementation):
    op = "relu_backward"
    plugin = "torch"
    dtypes = {"cpu": FLOATS, "cuda": FLOATS}

    def run(self, call: Call, config: dict) -> torch.Tensor:
        return torch.ops.aten.threshold_backward(call.inputs["grad"], call.inputs["y"], 0)
