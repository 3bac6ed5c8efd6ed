"""The spec in tensor ops, in float32: torch's special cases spelled out, C's pow otherwise."""

from __future__ import annotations

import torch

from kernelzoo.backends.tensor_ops import PythonImplementation
from kernelzoo.registry import Call


class PowPython(PythonImplementation):
    op = "pow"

    def run(self, call: Call, config: dict) -> torch.Tensor:
        x, exponent = call.inputs["x"].float(), call.params["exponent"]
        if exponent == 0.5:
            y = torch.sqrt(x)  # sqrt(-inf) = NaN, sqrt(-0) = -0
        elif exponent == -0.5:
            y = 1.0 / torch.sqrt(x)
        elif exponent == -1.0:
            y = 1.0 / x
        else:
            y = torch.pow(x, exponent)  # C's pow (1 for exponent 0)
        return y.to(call.dtype)
