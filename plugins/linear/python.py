"""The spec in tensor ops: x as an (M, K) matrix times weightᵀ in float32, plus the bias, through the
activation, rounded once; with ``pre``, z rounded too."""

from __future__ import annotations

import torch
from kernelzoo_plugins._gemm.activation import activate

from kernelzoo.backends.tensor_ops import PythonImplementation
from kernelzoo.registry import Call

from . import rows


class LinearPython(PythonImplementation):
    op = "linear"

    def run(self, call: Call, config: dict) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
        x, w, bias = call.inputs["x"], call.inputs["weight"], call.inputs.get("bias")
        z = rows(x).float() @ w.float().t()  # (M, N), every product summed in float32
        if bias is not None:
            z = z + bias.float()
        shape = (*x.shape[:-1], w.shape[0])
        out = call.empty(shape)
        out.copy_(activate(z, call.params.get("activation")).view(shape))
        if not call.params.get("pre"):
            return out
        pre = call.empty(shape)
        pre.copy_(z.view(shape))
        return out, pre
