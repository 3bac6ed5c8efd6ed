"""linear in raw CUDA: the shared GEMM core (gemm.cuh) with the bias fused into the epilogue.

fp16 / bf16 run on tensor cores (mma.sync m16n8k16 fed by ldmatrix), float32 on a register-tiled SIMT
kernel; both are cp.async pipelines over BK-deep tiles in grouped block order. Each op has an aligned
entry point (16-byte cp.async; needs K and N multiples of 16 bytes) and a guarded one (any shape).
GemmCudaImplementation is the base of every cuda plugin on that core (linear, linear_backward, conv2d,
conv2d_backward): config space, launch shape and the checks a config must pass for a call.
"""

from __future__ import annotations

import torch
from kernelzoo_plugins._gemm.cuda import GemmCudaImplementation, aligned

from kernelzoo.registry import Call

from . import rows


class LinearCuda(GemmCudaImplementation):
    op = "linear"

    def run(self, call: Call, config: dict) -> torch.Tensor:
        x, w, bias = call.inputs["x"], call.inputs["weight"], call.inputs.get("bias")
        out = call.empty((*x.shape[:-1], w.shape[0]))
        if out.numel() == 0:
            return out
        x2, w = rows(x).contiguous(), w.contiguous()
        bias = bias.contiguous() if bias is not None else None
        (m, k), n = x2.shape, w.shape[0]
        vec = self.vec(call.dtype)
        name = "linear_aligned" if k % vec == 0 and n % vec == 0 and aligned(x2, w) else "linear_guarded"
        self.launch_gemm(call, name, config, True, True, (x2, w, bias, out, m, n, k), self.tiles(m, n, config))
        return out
