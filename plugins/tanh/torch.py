"""torch.tanh: the baseline."""

from __future__ import annotations

import torch

from kernelzoo.backends.tensor_ops import TorchImplementation
from kernelzoo.registry import Call


class TanhTorch(TorchImplementation):
    op = "tanh"

    def run(self, call: Call, config: dict) -> torch.Tensor:
        return torch.tanh(call.inputs["x"])
