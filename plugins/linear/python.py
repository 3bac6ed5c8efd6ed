"""The spec in tensor ops: x as an (M, K) matrix times weightᵀ in float32, plus the bias, rounded once."""

from __future__ import annotations

import torch

from kernelzoo.backends.tensor_ops import PythonImplementation
from kernelzoo.registry import Call

from . import rows


class LinearPython(PythonImplementation):
    op = "linear"

    def run(self, call: Call, config: dict) -> torch.Tensor:
        x, w, bias = call.inputs["x"], call.inputs["weight"], call.inputs.get("bias")
        y = rows(x).float() @ w.float().t()  # (M, N), every product summed in float32
        if bias is not None:
            y = y + bias.float()
        out = call.empty((*x.shape[:-1], w.shape[0]))
        out.copy_(y.view(out.shape))
        return out
