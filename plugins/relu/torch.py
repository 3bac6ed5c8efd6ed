"""torch.relu: the baseline."""

from __future__ import annotations

import torch

from kernelzoo.backends.tensor_ops import TorchImplementation
from kernelzoo.registry import Call


class ReluTorch(TorchImplementation):
    op = "relu"

    def run(self, call: Call, config: dict) -> torch.Tensor:
        return torch.relu(call.inputs["x"])
