"""torch.mul: the baseline."""

from __future__ import annotations

import torch

from kernelzoo.backends.tensor_ops import TorchImplementation
from kernelzoo.registry import Call


class MulTorch(TorchImplementation):
    op = "mul"

    def run(self, call: Call, config: dict) -> torch.Tensor:
        return torch.mul(call.inputs["a"], call.inputs["b"])
