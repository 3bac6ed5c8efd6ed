"""The spec in tensor ops: a + alpha·b, broadcast by torch's rules, computed in float32."""

from __future__ import annotations

import torch

from kernelzoo.backends.tensor_ops import PythonImplementation
from kernelzoo.registry import Call


class AddPython(PythonImplementation):
    op = "add"

    def run(self, call: Call, config: dict) -> torch.Tensor:
        # float16/bfloat16 in float32: alpha·b rounded to 16 bits before the sum could cancel badly
        a, b = call.inputs["a"].float(), call.inputs["b"].float()
        return (a + call.params["alpha"] * b).to(call.dtype)
