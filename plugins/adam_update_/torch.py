"""torch's fused Adam / AdamW step (torch._fused_adam_ / _fused_adamw_, what torch.optim.Adam(fused=True)
runs): the baseline.

The fused kernel walks the tensors' memory in order, so they must share one dense layout: non-contiguous
ones go through contiguous copies. Without it (torch older than 2.4 on the CPU) the single-tensor step
torch.optim.Adam runs by default, in torch's order of operations.
"""

from __future__ import annotations

import torch
from kernelzoo_plugins._optim.spec import STATE, dense_run, scalars

from kernelzoo.registry import FLOATS, Call, Implementation


class AdamUpdateTorch(Implementation):
    op = "adam_update_"
    plugin = "torch"
    # float32 only on the GPU: there the composed step below (see run) rounds each op to the half type, which
    # misses the tolerance with L2 weight decay (the fp16/bf16 "adam-l2" conformance cases)
    dtypes = {"cpu": FLOATS, "cuda": (torch.float32,)}

    def run(self, call: Call, config: dict) -> tuple[torch.Tensor, ...]:
        c = call.params

        def update(t: dict[str, torch.Tensor]) -> None:
            p, g, m, v, v_max = (t[name] for name in STATE)
            fused = getattr(torch, "_fused_adamw_" if c["decoupled"] else "_fused_adam_", None)
            # CUDA's fused kernel maps NaN/Inf gradients differently from torch.optim's single-tensor step
            # (every NaN/Inf conformance case); the GPU runs the composed step
            if fused is not None and p.device.type == "cpu":
                step = torch.full((), float(c["step"]), dtype=torch.float32, device=p.device)
                fused([p], [g], [m], [v], [v_max] if c["amsgrad"] else [], [step], lr=c["lr"], beta1=c["beta1"],
                      beta2=c["beta2"], weight_decay=c["weight_decay"], eps=c["eps"], amsgrad=c["amsgrad"],
                      maximize=False)
                return
            s = scalars(call)
            if c["weight_decay"]:
                if c["decoupled"]:
                    p.mul_(s["decay"])
                else:
                    g = g.add(p, alpha=c["weight_decay"])
            m.lerp_(g, 1 - c["beta1"])
            v.mul_(c["beta2"]).addcmul_(g, g, value=1 - c["beta2"])
            if c["amsgrad"]:
                torch.maximum(v_max, v, out=v_max)
            denom = ((v_max if c["amsgrad"] else v).sqrt() / s["bc2_sqrt"]).add_(c["eps"])
            p.addcdiv_(m, denom, value=-s["step_size"])
        return dense_run(call, STATE, update)
