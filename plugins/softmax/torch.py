"""torch.softmax: the baseline."""

from __future__ import annotations

import torch

from kernelzoo.backends.tensor_ops import TorchImplementation
from kernelzoo.registry import Call


class SoftmaxTorch(TorchImplementation):
    op = "softmax"

    def run(self, call: Call, config: dict) -> torch.Tensor:
        return torch.softmax(call.inputs["x"], call.params["dim"])
