"""The spec in tensor ops: torch's single-tensor SGD step computed in float32, copied into the tensors."""

from __future__ import annotations

import torch

from kernelzoo.backends.tensor_ops import PythonImplementation
from kernelzoo.registry import Call


class SgdUpdatePython(PythonImplementation):
    op = "sgd_update_"

    def run(self, call: Call, config: dict) -> tuple[torch.Tensor, torch.Tensor]:
        param, grad, buf = (call.inputs[name] for name in ("param", "grad", "momentum_buffer"))
        lr, momentum, dampening, wd = (call.params[k] for k in ("lr", "momentum", "dampening", "weight_decay"))
        p, g = param.float(), grad.float()
        if wd != 0:
            g = g + wd * p
        if momentum != 0:
            b = momentum * buf.float() + (1 - dampening) * g
            g = g + momentum * b if call.params["nesterov"] else b
            buf.copy_(b)
        param.copy_(p - lr * g)
        return param, buf
