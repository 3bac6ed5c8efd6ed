"""The spec in tensor ops: 0.5·x·(1 + erf(x/√2)), or with tanh of the cubic, in float32."""

from __future__ import annotations

import torch

from kernelzoo.backends.tensor_ops import PythonImplementation
from kernelzoo.registry import Call

from . import KAPPA, SQRT_2_OVER_PI, SQRT_HALF


class GeluPython(PythonImplementation):
    op = "gelu"

    def run(self, call: Call, config: dict) -> torch.Tensor:
        x = call.inputs["x"].float()  # float16/bfloat16 are computed in float32, rounded once at the end
        if call.params["approximate"] == "tanh":
            inner = SQRT_2_OVER_PI * (x + KAPPA * x * x * x)
            y = 0.5 * x * (1.0 + torch.tanh(inner))
        else:
            y = 0.5 * x * (1.0 + torch.erf(x * SQRT_HALF))
        return y.to(call.dtype)
