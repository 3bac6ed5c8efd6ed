"""torch's own multi-tensor Adam / AdamW step: the baseline. On the CPU torch._fused_adam(w)_ takes the
lists (torch.optim.Adam(fused=True)); on the GPU the step is composed of torch._foreach_* ops in torch's
order, which is what torch.optim.AdamW(foreach=True) runs (adam_update_'s torch plugin explains why the
GPU does not run the fused kernel)."""

from __future__ import annotations

import torch
from kernelzoo_plugins._optim.spec import scalars

from kernelzoo.registry import FLOATS, Call, Implementation

from . import dense_lists, outputs_of


class AdamUpdateForeachTorch(Implementation):
    op = "adam_update_foreach_"
    plugin = "torch"
    # float32 only on the GPU, as adam_update_'s torch plugin: the composed step rounds each op to the half type
    dtypes = {"cpu": FLOATS, "cuda": (torch.float32,)}

    def run(self, call: Call, config: dict) -> tuple:
        dense, write_back = dense_lists(call)
        c = call.params
        p, g, m, v, v_max = (list(dense.inputs[name]) for name in
                             ("params", "grads", "exp_avgs", "exp_avg_sqs", "max_exp_avg_sqs"))
        with torch.no_grad():
            fused = getattr(torch, "_fused_adamw_" if c["decoupled"] else "_fused_adam_", None)
            if fused is not None and call.device.type == "cpu":
                steps = [torch.full((), float(c["step"]), dtype=torch.float32) for _ in p]
                fused(p, g, m, v, v_max, steps, lr=c["lr"], beta1=c["beta1"], beta2=c["beta2"],
                      weight_decay=c["weight_decay"], eps=c["eps"], amsgrad=c["amsgrad"], maximize=False)
            else:
                s = scalars(call)
                if c["weight_decay"]:
                    if c["decoupled"]:
                        torch._foreach_mul_(p, s["decay"])
                    else:
                        g = torch._foreach_add(g, p, alpha=c["weight_decay"])
                torch._foreach_lerp_(m, g, 1 - c["beta1"])
                torch._foreach_mul_(v, c["beta2"])
                torch._foreach_addcmul_(v, g, g, value=1 - c["beta2"])
                if c["amsgrad"]:
                    torch._foreach_maximum_(v_max, v)
                denom = torch._foreach_sqrt(v_max if c["amsgrad"] else v)
                torch._foreach_div_(denom, s["bc2_sqrt"])
                torch._foreach_add_(denom, c["eps"])
                torch._foreach_addcdiv_(p, m, denom, value=-s["step_size"])
        write_back()
        return outputs_of(call)
