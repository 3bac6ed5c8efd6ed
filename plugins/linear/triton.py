"""linear in Triton: a tiled tl.dot GEMM over strided operands with the bias and the activation fused into its
epilogue.

Each program computes one BLOCK_M×BLOCK_N tile of C = A·B (+ bias per column), stepping over K by
BLOCK_K with a float32 accumulator; tiles go in grouped order for L2 reuse. Operands are read through
their strides, so y = x·wᵀ reads w as it is, and linear_backward's two products (g·w and gᵀ·x) use
the same kernel through ``gemm``. fp16/bf16 go to the tensor cores; float32 runs in IEEE float32, in TF32 where
torch allows it, or as three TF32 products (the config's TF32X3). The activation (the epilogue's ACTIVATION) acts
on the float32 sums before the rounding; with ``pre`` the GEMM stores z and one elementwise pass makes y = act(z).
"""

from __future__ import annotations

import torch
from kernelzoo_plugins._gemm.activation import CODES
from kernelzoo_plugins._gemm.activation_triton import activation_kernel
from kernelzoo_plugins._gemm.triton import GemmTritonImplementation, gemm

from kernelzoo.backends.triton import cdiv, launcher
from kernelzoo.registry import Call

from . import rows

ACTIVATION_BLOCK = 1024  # elements per program of the y = act(z) pass


class LinearTriton(GemmTritonImplementation):
    op = "linear"

    def run(self, call: Call, config: dict) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
        x, w, bias = call.inputs["x"], call.inputs["weight"], call.inputs.get("bias")
        shape = (*x.shape[:-1], w.shape[0])
        out = call.empty(shape)
        activation = CODES[call.params.get("activation")]
        if not call.params.get("pre"):
            if out.numel():
                gemm(rows(x), w.t(), out.view(-1, w.shape[0]), bias, config, activation=activation)
            return out
        pre = call.empty(shape)
        if out.numel():
            gemm(rows(x), w.t(), pre.view(-1, w.shape[0]), bias, config)
            launcher(activation_kernel)[(cdiv(out.numel(), ACTIVATION_BLOCK),)](
                pre, out, out.numel(), ACTIVATION=activation, BLOCK=ACTIVATION_BLOCK)
        return out, pre
