"""torch.tanh: the baseline."""

from __future__ import annotations

import torch

from kernelzoo.registry import FLOATS, Call, Implementation


class TanhTorch(Implementation):
    op = "tanh"
    plugin = "torch"
    dtypes = {"cpu": FLOATS, "cuda": FLOATS}

    def run(self, call: Call, config: dict) -> torch.Tensor:
        return torch.tanh(call.inputs["x"])
