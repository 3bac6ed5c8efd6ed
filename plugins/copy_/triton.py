"""copy_ in Triton: the shared copy kernels (kernelzoo.backends.triton_elementwise), one program per
BLOCK elements: a plain one for dense dst and src of one shape, else a strided one over the merged
layout (dst's dimensions in its memory order, src broadcast at stride 0). Values are moved, not
converted."""

from __future__ import annotations

import torch

from kernelzoo.backends.triton import TritonImplementation, cdiv, launcher
from kernelzoo.backends.triton_elementwise import copy_dense_kernel, copy_strided_kernel, layout_args, wide
from kernelzoo.registry import Call

from . import copy_parts


class CopyTriton(TritonImplementation):
    op = "copy_"
    config_space = {"BLOCK": [512, 1024, 2048, 4096, 8192], "num_warps": [2, 4, 8, 16]}
    default_config = {"BLOCK": 2048, "num_warps": 8}

    def run(self, call: Call, config: dict) -> torch.Tensor:
        block, warps = config["BLOCK"], config["num_warps"]
        for dst, src, plan in copy_parts(call.inputs["dst"], call.inputs["src"]):
            n = dst.numel()
            if n == 0:
                continue
            grid = (cdiv(n, block),)
            if plan.contiguous:
                launcher(copy_dense_kernel)[grid](dst, src, n, BLOCK=block, num_warps=warps)
            else:
                launcher(copy_strided_kernel)[grid](
                    dst, src, n, *layout_args(plan), NDIM=len(plan.sizes), WIDE=wide(n, block), BLOCK=block,
                    num_warps=warps)
        return call.inputs["dst"]
