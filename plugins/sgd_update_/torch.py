"""torch's fused SGD step (torch._fused_sgd_, what torch.optim.SGD(fused=True) runs): the baseline.

The fused kernel walks the tensors' memory in order, so they must share one dense layout (a sliced param
with a transposed grad came out wrong in torch 2.13): non-contiguous ones go through contiguous copies.
Without it (torch older than 2.4 on the CPU) the single-tensor step torch.optim.SGD runs by default.
"""

from __future__ import annotations

import torch
from kernelzoo_plugins._optim.spec import dense_run

from kernelzoo.registry import FLOATS, Call, Implementation


class SgdUpdateTorch(Implementation):
    op = "sgd_update_"
    plugin = "torch"
    # torch 2.13's CPU _fused_sgd_ gets float16 / bfloat16 wrong (off by ~0.2 at lr 0.1, momentum or not)
    dtypes = {"cpu": (torch.float32,), "cuda": FLOATS}

    def run(self, call: Call, config: dict) -> tuple[torch.Tensor, ...]:
        c = call.params
        kwargs = {k: c[k] for k in ("weight_decay", "momentum", "lr", "dampening", "nesterov")}

        def update(t: dict[str, torch.Tensor]) -> None:
            param, grad, buf = t["param"], t["grad"], t["momentum_buffer"]
            if hasattr(torch, "_fused_sgd_"):
                torch._fused_sgd_([param], [grad], [buf] if c["momentum"] else [], **kwargs, maximize=False,
                                  is_first_step=False)
                return
            g = grad.add(param, alpha=c["weight_decay"]) if c["weight_decay"] else grad
            if c["momentum"]:
                buf.mul_(c["momentum"]).add_(g, alpha=1 - c["dampening"])
                g = g.add(buf, alpha=c["momentum"]) if c["nesterov"] else buf
            param.add_(g, alpha=-c["lr"])
        return dense_run(call, ("param", "grad", "momentum_buffer"), update)
