"""linear in raw CUDA: the shared GEMM core (gemm.cuh) with the bias and the activation (KZ_ACTIVATION, a define)
fused into the epilogue; with ``pre`` the GEMM stores z and one elementwise pass makes y = act(z).

fp16 / bf16 run on tensor cores (mma.sync m16n8k16 fed by ldmatrix), float32 on a register-tiled SIMT
kernel; both are cp.async pipelines over BK-deep tiles in grouped block order. Each op has an aligned
entry point (16-byte cp.async; needs K and N multiples of 16 bytes) and a guarded one (any shape).
GemmCudaImplementation is the base of every cuda plugin on that core (linear, linear_backward, conv2d,
conv2d_backward): config space, launch shape and the checks a config must pass for a call.
"""

from __future__ import annotations

import torch
from kernelzoo_plugins._gemm.activation import CODES
from kernelzoo_plugins._gemm.cuda import GemmCudaImplementation, aligned

from kernelzoo.backends.cuda import I64
from kernelzoo.registry import Call

from . import rows

ACTIVATION_THREADS = 256  # per block of the y = act(z) pass


class LinearCuda(GemmCudaImplementation):
    op = "linear"

    def run(self, call: Call, config: dict) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
        x, w, bias = call.inputs["x"], call.inputs["weight"], call.inputs.get("bias")
        shape = (*x.shape[:-1], w.shape[0])
        out = call.empty(shape)
        pre = call.empty(shape) if call.params.get("pre") else None
        if out.numel() == 0:
            return out if pre is None else (out, pre)
        x2, w = rows(x).contiguous(), w.contiguous()
        bias = bias.contiguous() if bias is not None else None
        (m, k), n = x2.shape, w.shape[0]
        vec = self.vec(call.dtype)
        name = "linear_aligned" if k % vec == 0 and n % vec == 0 and aligned(x2, w) else "linear_guarded"
        activation = CODES[call.params.get("activation")]
        # the activation is a define: one module per activation, the plain GEMM's config unchanged without one
        fused = {**config, "KZ_ACTIVATION": activation} if activation and pre is None else config
        self.launch_gemm(call, name, fused, True, True, (x2, w, bias, out if pre is None else pre, m, n, k),
                         self.tiles(m, n, config))
        if pre is None:
            return out
        self.kernel("activation_pass", call.dtype, {**config, "KZ_ACTIVATION": activation})(
            pre, out, I64(out.numel()), grid=-(-out.numel() // ACTIVATION_THREADS), block=ACTIVATION_THREADS)
        return out, pre
