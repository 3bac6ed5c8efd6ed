"""The spec in tensor ops: softmax(q·kᵀ·scale + mask)·v with the score matrix materialised (a chunk
of query rows at a time), computed in float32 whatever the input dtype (8-bit float inputs dequantized
to float32 first, o cast to out_dtype)."""

from __future__ import annotations

import torch
from kernelzoo_plugins._flash.fp8 import dequantized, is_fp8, output_dtype
from kernelzoo_plugins._flash.spec import attention_math

from kernelzoo.registry import FLOATS, FP8, Call, Implementation


class AttentionPython(Implementation):
    op = "attention"
    plugin = "python"
    dtypes = {"cpu": (torch.float32, *FP8), "cuda": FLOATS + FP8}

    def run(self, call: Call, config: dict) -> tuple[torch.Tensor, torch.Tensor]:
        i = call.inputs
        q, k, v = dequantized(call, torch.float32) if is_fp8(call) else (i["q"], i["k"], i["v"])
        o, lse = attention_math(q, k, v, i.get("attn_mask"), call.params["causal"], call.params["scale"],
                                torch.float32)
        return o.to(output_dtype(call)), lse
