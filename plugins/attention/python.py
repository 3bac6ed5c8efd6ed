"""The spec in tensor ops: softmax(q·kᵀ·scale + mask)·v with the score matrix materialised (a chunk
of query rows at a time), computed in float32 whatever the input dtype."""

from __future__ import annotations

import torch
from kernelzoo_plugins._flash.spec import attention_math

from kernelzoo.registry import FLOATS, Call, Implementation


class AttentionPython(Implementation):
    op = "attention"
    plugin = "python"
    dtypes = {"cpu": (torch.float32,), "cuda": FLOATS}

    def run(self, call: Call, config: dict) -> tuple[torch.Tensor, torch.Tensor]:
        i = call.inputs
        o, lse = attention_math(i["q"], i["k"], i["v"], i.get("attn_mask"), call.params["causal"],
                                call.params["scale"], torch.float32)
        return o.to(call.dtype), lse
