"""The spec in tensor ops: keep x where it is not negative (NaN included), else 0."""

from __future__ import annotations

import torch

from kernelzoo.backends.tensor_ops import PythonImplementation
from kernelzoo.registry import Call


class ReluPython(PythonImplementation):
    op = "relu"

    def run(self, call: Call, config: dict) -> torch.Tensor:
        x = call.inputs["x"]
        return torch.where(x < 0, torch.zeros_like(x), x)
