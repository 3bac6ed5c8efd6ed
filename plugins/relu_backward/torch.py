"""torch's threshold_backward(grad, y, 0) (what torch.relu's autograd runs): the baseline."""

from __future__ import annotations

import torch

from kernelzoo.backends.tensor_ops import TorchImplementation
from kernelzoo.registry import Call


class ReluBackwardTorch(TorchImplementation):
    op = "relu_backward"

    def run(self, call: Call, config: dict) -> torch.Tensor:
        return torch.ops.aten.threshold_backward(call.inputs["grad"], call.inputs["y"], 0)
