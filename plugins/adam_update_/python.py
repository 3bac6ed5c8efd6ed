"""The spec in tensor ops: torch's single-tensor Adam step computed in float32, copied into the tensors."""

from __future__ import annotations

import torch
from kernelzoo_plugins._optim.spec import STATE, scalars

from kernelzoo.backends.tensor_ops import PythonImplementation
from kernelzoo.registry import Call


class AdamUpdatePython(PythonImplementation):
    op = "adam_update_"

    def run(self, call: Call, config: dict) -> tuple[torch.Tensor, ...]:
        param, grad, exp_avg, exp_avg_sq, v_max = (call.inputs[name] for name in STATE)
        c, s = call.params, scalars(call)
        p, g = param.float(), grad.float()
        if c["weight_decay"] != 0:
            if c["decoupled"]:
                p = p * s["decay"]
            else:
                g = g + c["weight_decay"] * p
        m = torch.lerp(exp_avg.float(), g, 1 - c["beta1"])
        v = exp_avg_sq.float() * c["beta2"] + (1 - c["beta2"]) * g * g
        if c["amsgrad"]:
            v_max.copy_(torch.maximum(v_max.float(), v))
        denom = (v_max.float() if c["amsgrad"] else v).sqrt() / s["bc2_sqrt"] + c["eps"]
        param.copy_(p - s["step_size"] * (m / denom))
        exp_avg.copy_(m)
        exp_avg_sq.copy_(v)
        return param, exp_avg, exp_avg_sq, v_max
