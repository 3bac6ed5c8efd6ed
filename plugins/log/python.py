"""The spec in tensor ops: log in float32, rounded once to the input's dtype."""

from __future__ import annotations

import torch

from kernelzoo.registry import FLOATS, Call, Implementation


class LogPython(Implementation):
    op = "log"
    plugin = "python"
    dtypes = {"cpu": FLOATS, "cuda": FLOATS}

    def run(self, call: Call, config: dict) -> torch.Tensor:
        return torch.log(call.inputs["x"].float()).to(call.dtype)
