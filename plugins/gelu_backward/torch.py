"""torch.ops.aten.gelu_backward (what torch.nn.functional.gelu's autograd runs): the baseline."""

from __future__ import annotations

import torch

from kernelzoo.backends.tensor_ops import TorchImplementation
from kernelzoo.registry import Call


class GeluBackwardTorch(TorchImplementation):
    op = "gelu_backward"

    def run(self, call: Call, config: dict) -> torch.Tensor:
        grad, x = call.inputs["grad"], call.inputs["x"]
        if grad.shape != x.shape:
            # torch 2.13's CPU erf kernel for float32 and bfloat16 goes through oneDNN, which fails on
            # operands of different shapes ("could not create a primitive descriptor for the reorder
            # primitive"); broadcast (stride-0) views of one shape it takes
            grad, x = torch.broadcast_tensors(grad, x)
        return torch.ops.aten.gelu_backward(grad, x, approximate=call.params["approximate"])
