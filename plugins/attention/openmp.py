"""Attention in OpenMP C (openmp.c): FlashAttention-2's tiled algorithm with an online softmax,
float32, parallel over (batch, head, block of BLOCK_M query rows), K and V streamed in blocks of
BLOCK_N keys. The C source, shared with the backward, is the family's (plugins/_flash/openmp.c).
8-bit float inputs are dequantized to float32 first, and o cast to out_dtype."""

from __future__ import annotations

import torch
from kernelzoo_plugins._flash.fp8 import is_fp8, output_dtype, trivial_output, upcast
from kernelzoo_plugins._flash.openmp import CDEF, CONFIG_SPACE, NULL, SOURCE, dims, mask_view, rows_contiguous
from kernelzoo_plugins._flash.spec import like

from kernelzoo.backends.openmp import OpenMPImplementation, ptr, thread_counts
from kernelzoo.registry import FP8, Call


class AttentionOpenMP(OpenMPImplementation):
    op = "attention"
    dtypes = {"cpu": (torch.float32, *FP8)}
    sources = (SOURCE,)
    cdef = CDEF
    config_space = CONFIG_SPACE
    default_config = {"BLOCK_M": 64, "BLOCK_N": 128, "threads": thread_counts()[-1]}

    def run(self, call: Call, config: dict) -> tuple[torch.Tensor, torch.Tensor]:
        trivial = trivial_output(call)
        if trivial is not None:
            return trivial
        if is_fp8(call):
            o, lse = self.run(upcast(call), config)
            return o.to(output_dtype(call)), lse
        q, k, v = (rows_contiguous(call.inputs[name]) for name in ("q", "k", "v"))
        mask = mask_view(call)
        o, lse = like(call, q), call.empty(q.shape[:3], torch.float32)
        shape = dims(call, q=q, k=k, v=v, o=o, mask=mask)
        lib = self.library(BLOCK_M=config["BLOCK_M"], BLOCK_N=config["BLOCK_N"])
        lib.attention_forward(ptr(q), ptr(k), ptr(v), ptr(mask) if mask is not None else NULL, ptr(o), ptr(lse),
                              ptr(shape, "long long *"), call.params["scale"], config["threads"])
        return o, lse
