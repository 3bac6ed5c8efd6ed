"""linear's gradients in Triton: with an activation, dz = grad_out·act'(pre) as one elementwise pass (float32
math, stored in the dtype the products read); the two products on linear's strided gemm kernel; and the bias
gradient as a deterministic two-pass sum (``channel_sums``: per-split partials in float32, then the splits in
order).
"""

from __future__ import annotations

import torch
from kernelzoo_plugins._gemm.activation import CODES
from kernelzoo_plugins._gemm.activation_triton import activation_grad_kernel
from kernelzoo_plugins._gemm.spec import rows
from kernelzoo_plugins._gemm.triton import GemmTritonImplementation, channel_sums, gemm

from kernelzoo.backends.triton import cdiv, launcher
from kernelzoo.registry import Call

from . import gradient_shapes

DZ_BLOCK_M, DZ_BLOCK_N = 32, 64  # the tile of one program of the dz pass


class LinearBackwardTriton(GemmTritonImplementation):
    op = "linear_backward"

    def run(self, call: Call, config: dict) -> tuple[torch.Tensor, ...]:
        g2, x2, w = rows(call.inputs["grad_out"]), rows(call.inputs["x"]), call.inputs["weight"]
        activation = call.params.get("activation")
        if activation is not None and g2.numel():
            p2 = rows(call.inputs["pre"])
            dz = torch.empty(g2.shape, dtype=g2.dtype, device=g2.device)
            (m, n) = g2.shape
            launcher(activation_grad_kernel)[(cdiv(m, DZ_BLOCK_M), cdiv(n, DZ_BLOCK_N))](
                g2, p2, dz, m, n, *g2.stride(), *p2.stride(), ACTIVATION=CODES[activation], BLOCK_M=DZ_BLOCK_M,
                BLOCK_N=DZ_BLOCK_N)
            g2 = dz
        outs = tuple(call.empty(shape) for shape in gradient_shapes(call))
        gx, gw = rows(outs[0]), outs[1]
        if gx.numel():
            gemm(g2, w, gx, None, config)  # (M, N) · (N, K)
        if gw.numel():
            gemm(g2.t(), x2, gw, None, config)  # (N, M) · (M, K)
        if call.params["bias"]:
            channel_sums(g2.t().unsqueeze(0), outs[2])  # (1, N, M): columns of g
        return outs
