"""torch.nn.functional.max_pool2d with return_indices: the baseline."""

from __future__ import annotations

import torch

from kernelzoo.backends.tensor_ops import TorchImplementation
from kernelzoo.registry import Call


class MaxPool2dTorch(TorchImplementation):
    op = "max_pool2d"

    def run(self, call: Call, config: dict) -> tuple[torch.Tensor, torch.Tensor]:
        return torch.nn.functional.max_pool2d(call.inputs["x"], return_indices=True, **call.params)
