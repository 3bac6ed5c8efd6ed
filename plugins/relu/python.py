"""The spec in tensor ops: keep x where it is not negative (NaN included), else 0."""

from __future__ import annotations

import torch

from kernelzoo.registry import FLOATS, Call, Implementation


class ReluPython(Implementation):
    op = "relu"
    plugin = "python"
    dtypes = {"cpu": FLOATS, "cuda": FLOATS}

    def run(self, call: Call, config: dict) -> torch.Tensor:
        x = call.inputs["x"]
        return torch.where(x < 0, torch.zeros_like(x), x)
