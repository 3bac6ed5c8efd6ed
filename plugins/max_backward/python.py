"""The spec in tensor ops: zeros of x's (outer, reduced, inner) shape, grad scattered at indices along the
middle dim."""

from __future__ import annotations

import torch

from kernelzoo.backends.tensor_ops import PythonImplementation
from kernelzoo.registry import Call


class MaxBackwardPython(PythonImplementation):
    op = "max_backward"

    def run(self, call: Call, config: dict) -> torch.Tensor:
        p = call.op.plan(call)
        g, indices = call.inputs["grad"], call.inputs["indices"]
        grad_x = torch.zeros((p.outer, p.reduced, p.inner), dtype=g.dtype, device=g.device)
        grad_x.scatter_(1, indices.reshape(p.outer, 1, p.inner), g.reshape(p.outer, 1, p.inner))
        return grad_x.view(call.params["input_shape"])
