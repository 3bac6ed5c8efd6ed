"""torch.exp: the baseline."""

from __future__ import annotations

import torch

from kernelzoo.registry import FLOATS, Call, Implementation


class ExpTorch(Implementation):
    op = "exp"
    plugin = "torch"
    dtypes = {"cpu": FLOATS, "cuda": FLOATS}

    def run(self, call: Call, config: dict) -> torch.Tensor:
        return torch.exp(call.inputs["x"])
