"""The spec in tensor ops: tanh in float32, rounded once to the input's dtype."""

from __future__ import annotations

import torch

from kernelzoo.registry import FLOATS, Call, Implementation


class TanhPython(Implementation):
    op = "tanh"
    plugin = "python"
    dtypes = {"cpu": FLOATS, "cuda": FLOATS}

    def run(self, call: Call, config: dict) -> torch.Tensor:
        return torch.tanh(call.inputs["x"].float()).to(call.dtype)
