"""torch.softmax: the baseline."""

from __future__ import annotations

import torch

from kernelzoo.registry import FLOATS, Call, Implementation


class SoftmaxTorch(Implementation):
    op = "softmax"
    plugin = "torch"
    dtypes = {"cpu": FLOATS, "cuda": FLOATS}

    def run(self, call: Call, config: dict) -> torch.Tensor:
        return torch.softmax(call.inputs["x"], call.params["dim"])
