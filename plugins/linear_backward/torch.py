"""The gradients as torch computes them for F.linear's backward (cuBLAS / MKL products, a sum)."""

from __future__ import annotations

import torch
from kernelzoo_plugins._gemm.spec import rows

from kernelzoo.backends.tensor_ops import TorchImplementation
from kernelzoo.registry import Call


class LinearBackwardTorch(TorchImplementation):
    op = "linear_backward"

    def run(self, call: Call, config: dict) -> tuple[torch.Tensor, ...]:
        g, x, w = call.inputs["grad_out"], call.inputs["x"], call.inputs["weight"]
        g2 = rows(g)
        grads = (torch.matmul(g, w), g2.t().mm(rows(x)))
        return (*grads, g2.sum(0)) if call.params["bias"] else grads
