"""torch.relu: the baseline."""

from __future__ import annotations

import torch

from kernelzoo.registry import FLOATS, Call, Implementation


class ReluTorch(Implementation):
    op = "relu"
    plugin = "torch"
    dtypes = {"cpu": FLOATS, "cuda": FLOATS}

    def run(self, call: Call, config: dict) -> torch.Tensor:
        return torch.relu(call.inputs["x"])
