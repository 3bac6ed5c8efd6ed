"""The attention backward in OpenMP C (../_flash/openmp.c, the forward's library), float32: per
key block dK and dV (and dQ, fused) from P recomputed from lse."""

from __future__ import annotations

import torch
from kernelzoo_plugins._flash.openmp import CDEF, CONFIG_SPACE, NULL, SOURCE, dims, mask_view, rows_contiguous

from kernelzoo.backends.openmp import OpenMPImplementation, ptr, thread_counts
from kernelzoo.registry import Call

from . import gradients_like, trivial_backward


class AttentionBackwardOpenMP(OpenMPImplementation):
    op = "attention_backward"
    sources = (SOURCE,)
    cdef = CDEF
    # fused: dQ in the dK/dV tasks, one per (batch, kv head): 5 products per block pair instead of 7,
    # but no more parallel tasks than kv heads (openmp.c)
    config_space = {**CONFIG_SPACE, "fused": [0, 1]}
    default_config = {"BLOCK_M": 64, "BLOCK_N": 128, "threads": thread_counts()[-1], "fused": 1}

    def run(self, call: Call, config: dict) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        trivial = trivial_backward(call)
        if trivial is not None:
            return trivial
        q, k, v, o, do = (rows_contiguous(call.inputs[name]) for name in ("q", "k", "v", "o", "do"))
        lse, mask = call.inputs["lse"].contiguous(), mask_view(call)
        dq, dk, dv = gradients_like(call)
        shape = dims(call, q=q, k=k, v=v, o=o, d_o=do, dq=dq, dk=dk, dv=dv, mask=mask)
        lib = self.library(BLOCK_M=config["BLOCK_M"], BLOCK_N=config["BLOCK_N"])
        lib.attention_backward(ptr(q), ptr(k), ptr(v), ptr(mask) if mask is not None else NULL, ptr(o), ptr(lse),
                               ptr(do), ptr(dq), ptr(dk), ptr(dv), ptr(shape, "long long *"), call.params["scale"],
                               config["threads"], config["fused"])
        return dq, dk, dv
