"""The spec in tensor ops: eˣ in float32, rounded once to the input's dtype."""

from __future__ import annotations

import torch

from kernelzoo.backends.tensor_ops import PythonImplementation
from kernelzoo.registry import Call


class ExpPython(PythonImplementation):
    op = "exp"

    def run(self, call: Call, config: dict) -> torch.Tensor:
        return torch.exp(call.inputs["x"].float()).to(call.dtype)
