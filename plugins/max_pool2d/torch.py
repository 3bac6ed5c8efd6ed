"""torch.nn.functional.max_pool2d with return_indices: the baseline."""

from __future__ import annotations

import torch

from kernelzoo.registry import FLOATS, Call, Implementation


class MaxPool2dTorch(Implementation):
    op = "max_pool2d"
    plugin = "torch"
    dtypes = {"cpu": FLOATS, "cuda": FLOATS}

    def run(self, call: Call, config: dict) -> tuple[torch.Tensor, torch.Tensor]:
        return torch.nn.functional.max_pool2d(call.inputs["x"], return_indices=True, **call.params)
