"""linear's gradients in raw CUDA: with an activation, dz = grad_out·act'(pre) as one elementwise pass; two
products on the shared GEMM core (gemm.cuh) — tensor cores for fp16/bf16, SIMT float32 — and the bias gradient
as deterministic two-pass column sums."""

from __future__ import annotations

import torch
from kernelzoo_plugins._gemm.activation import CODES
from kernelzoo_plugins._gemm.cuda import GemmCudaImplementation, aligned, column_sums
from kernelzoo_plugins._gemm.spec import rows

from kernelzoo.backends.cuda import I64
from kernelzoo.registry import Call

from . import gradient_shapes

ACTIVATION_THREADS = 256  # per block of the dz pass


class LinearBackwardCuda(GemmCudaImplementation):
    op = "linear_backward"

    def run(self, call: Call, config: dict) -> tuple[torch.Tensor, ...]:
        g2, x2 = rows(call.inputs["grad_out"]).contiguous(), rows(call.inputs["x"]).contiguous()
        w = call.inputs["weight"].contiguous()
        activation = call.params.get("activation")
        if activation is not None and g2.numel():
            pre, dz = rows(call.inputs["pre"]).contiguous(), torch.empty_like(g2)
            self.kernel("activation_grad_pass", call.dtype, {**config, "KZ_ACTIVATION": CODES[activation]})(
                g2, pre, dz, I64(g2.numel()), grid=-(-g2.numel() // ACTIVATION_THREADS), block=ACTIVATION_THREADS)
            g2 = dz
        outs = tuple(call.empty(shape) for shape in gradient_shapes(call))
        gx, gw = rows(outs[0]), outs[1]
        (m, k), n = x2.shape, w.shape[0]
        vec = self.vec(call.dtype)
        kind = "aligned" if k % vec == 0 and n % vec == 0 and aligned(g2, x2, w) else "guarded"
        if gx.numel():
            self.launch_gemm(call, f"grad_x_{kind}", config, True, False, (g2, w, gx, m, n, k),
                             self.tiles(m, k, config))
        if gw.numel():  # with no tokens (M = 0) an empty sum: the kernel writes zeros
            self.launch_gemm(call, f"grad_w_{kind}", config, False, False, (g2, x2, gw, m, n, k),
                             self.tiles(n, k, config))
        if call.params["bias"] and n:
            column_sums(self, call, config, g2, n, m, n, outs[2])
        return outs
