"""linear's gradients in Triton: the two products on linear's strided gemm kernel, and the bias gradient
as a deterministic two-pass sum (``channel_sums``: per-split partials in float32, then the splits in order).
"""

from __future__ import annotations

import torch
from kernelzoo_plugins._gemm.spec import rows
from kernelzoo_plugins._gemm.triton import GemmTritonImplementation, channel_sums, gemm

from kernelzoo.registry import Call

from . import gradient_shapes


class LinearBackwardTriton(GemmTritonImplementation):
    op = "linear_backward"

    def run(self, call: Call, config: dict) -> tuple[torch.Tensor, ...]:
        g2, x2, w = rows(call.inputs["grad_out"]), rows(call.inputs["x"]), call.inputs["weight"]
        outs = tuple(call.empty(shape) for shape in gradient_shapes(call))
        gx, gw = rows(outs[0]), outs[1]
        if gx.numel():
            gemm(g2, w, gx, None, config)  # (M, N) · (N, K)
        if gw.numel():
            gemm(g2.t(), x2, gw, None, config)  # (N, M) · (M, K)
        if call.params["bias"]:
            channel_sums(g2.t().unsqueeze(0), outs[2])  # (1, N, M): columns of g
        return outs
