"""The spec in tensor ops: grad times gelu's derivative, torch's formulas, computed in float32."""

from __future__ import annotations

import torch
from kernelzoo_plugins._elementwise.spec import KAPPA, SQRT_2_OVER_PI, SQRT_HALF

from kernelzoo.backends.tensor_ops import PythonImplementation
from kernelzoo.registry import Call

from . import INV_SQRT_2PI


class GeluBackwardPython(PythonImplementation):
    op = "gelu_backward"

    def run(self, call: Call, config: dict) -> torch.Tensor:
        # float16/bfloat16 are computed in float32, rounded once at the end
        grad, x = call.inputs["grad"].float(), call.inputs["x"].float()
        if call.params["approximate"] == "tanh":
            t = torch.tanh(SQRT_2_OVER_PI * (x + KAPPA * x * x * x))
            inner_derivative = SQRT_2_OVER_PI * (1.0 + 3.0 * KAPPA * x * x)
            derivative = 0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * inner_derivative
        else:
            cdf = 0.5 * (1.0 + torch.erf(x * SQRT_HALF))
            derivative = cdf + x * torch.exp(-0.5 * x * x) * INV_SQRT_2PI
        return (grad * derivative).to(call.dtype)
