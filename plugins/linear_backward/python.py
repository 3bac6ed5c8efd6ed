"""The spec in tensor ops: dz = grad_out·act'(pre) rounded to the dtype (as the kernels' products read it),
then the three gradients as float32 products and sums, each rounded once."""

from __future__ import annotations

import torch
from kernelzoo_plugins._gemm.activation import activation_grad
from kernelzoo_plugins._gemm.spec import rows

from kernelzoo.backends.tensor_ops import PythonImplementation
from kernelzoo.registry import Call

from . import gradient_shapes


class LinearBackwardPython(PythonImplementation):
    op = "linear_backward"

    def run(self, call: Call, config: dict) -> tuple[torch.Tensor, ...]:
        g = call.inputs["grad_out"]
        activation = call.params.get("activation")
        if activation is not None:
            g = activation_grad(g.float(), call.inputs["pre"].float(), activation).to(g.dtype)
        g2 = rows(g).float()  # (M, N)
        x2, w = rows(call.inputs["x"]).float(), call.inputs["weight"].float()  # (M, K), (N, K)
        grads = [g2 @ w, g2.t() @ x2, g2.sum(0)]  # (M, K), (N, K), (N,)
        outs = tuple(call.empty(shape) for shape in gradient_shapes(call))
        for out, grad in zip(outs, grads):
            out.copy_(grad.view(out.shape))
        return outs
