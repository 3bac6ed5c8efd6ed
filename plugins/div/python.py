"""The spec in tensor ops: a / b, broadcast by torch's rules, computed in float32."""

from __future__ import annotations

import torch

from kernelzoo.backends.tensor_ops import PythonImplementation
from kernelzoo.registry import Call


class DivPython(PythonImplementation):
    op = "div"

    def run(self, call: Call, config: dict) -> torch.Tensor:
        a, b = call.inputs["a"].float(), call.inputs["b"].float()
        return (a / b).to(call.dtype)
