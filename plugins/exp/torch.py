"""torch.exp: the baseline."""

from __future__ import annotations

import torch

from kernelzoo.backends.tensor_ops import TorchImplementation
from kernelzoo.registry import Call


class ExpTorch(TorchImplementation):
    op = "exp"

    def run(self, call: Call, config: dict) -> torch.Tensor:
        return torch.exp(call.inputs["x"])
