"""The backward's textbook formulas in tensor ops, with the score matrix materialised (a chunk of
query rows at a time), computed in float32 whatever the input dtype: P = softmax(S), dP = dO·Vᵀ,
dS = P∘(dP − rowsum(dO∘O)), dQ = dS·K·scale, dK = dSᵀ·Q·scale, dV = Pᵀ·dO."""

from __future__ import annotations

import torch
from kernelzoo_plugins._flash.spec import attention_backward_math

from kernelzoo.registry import FLOATS, Call, Implementation


class AttentionBackwardPython(Implementation):
    op = "attention_backward"
    plugin = "python"
    dtypes = {"cpu": (torch.float32,), "cuda": FLOATS}

    def run(self, call: Call, config: dict) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        i = call.inputs
        grads = attention_backward_math(i["q"], i["k"], i["v"], i["do"], i.get("attn_mask"), call.params["causal"],
                                        call.params["scale"], torch.float32, o=i["o"])
        return tuple(g.to(call.dtype) for g in grads)  # type: ignore[return-value]
