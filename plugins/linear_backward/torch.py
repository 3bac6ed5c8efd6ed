"""The gradients as torch computes them for F.linear's backward (cuBLAS / MKL products, a sum), after torch's
own backward of the activation (threshold_backward, gelu_backward) in the dtype."""

from __future__ import annotations

import torch
from kernelzoo_plugins._gemm.spec import rows

from kernelzoo.backends.tensor_ops import TorchImplementation
from kernelzoo.registry import Call


class LinearBackwardTorch(TorchImplementation):
    op = "linear_backward"

    def run(self, call: Call, config: dict) -> tuple[torch.Tensor, ...]:
        g, x, w = call.inputs["grad_out"], call.inputs["x"], call.inputs["weight"]
        activation = call.params.get("activation")
        if activation == "relu":
            g = torch.ops.aten.threshold_backward(g, call.inputs["pre"], 0)
        elif activation is not None:
            g = torch.ops.aten.gelu_backward(g, call.inputs["pre"],
                                             approximate="tanh" if activation == "gelu_tanh" else "none")
        g2 = rows(g)
        grads = (torch.matmul(g, w), g2.t().mm(rows(x)))
        return (*grads, g2.sum(0)) if call.params["bias"] else grads
