"""torch.nn.functional.gelu: the baseline."""

from __future__ import annotations

import torch

from kernelzoo.backends.tensor_ops import TorchImplementation
from kernelzoo.registry import Call


class GeluTorch(TorchImplementation):
    op = "gelu"

    def run(self, call: Call, config: dict) -> torch.Tensor:
        x, approximate = call.inputs["x"], call.params["approximate"]
        y = torch.nn.functional.gelu(x, approximate=approximate)
        if x.device.type == "cpu" and approximate == "none":
            # torch's vectorised CPU erf-gelu gives NaN for +inf in float32 and bfloat16
            # (pytorch/pytorch#185770; its scalar path and the GPU give inf): put the inf back
            y = torch.where(x == float("inf"), x, y)
        return y
