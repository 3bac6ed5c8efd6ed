"""torch.log: the baseline."""

from __future__ import annotations

import torch

from kernelzoo.registry import FLOATS, Call, Implementation


class LogTorch(Implementation):
    op = "log"
    plugin = "torch"
    dtypes = {"cpu": FLOATS, "cuda": FLOATS}

    def run(self, call: Call, config: dict) -> torch.Tensor:
        return torch.log(call.inputs["x"])
