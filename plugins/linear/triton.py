"""linear in Triton: a tiled tl.dot GEMM over strided operands with the bias fused into its epilogue.

Each program computes one BLOCK_M×BLOCK_N tile of C = A·B (+ bias per column), stepping over K by
BLOCK_K with a float32 accumulator; tiles go in grouped order for L2 reuse. Operands are read through
their strides, so y = x·wᵀ reads w as it is, and linear_backward's two products (g·w and gᵀ·x) use
the same kernel through ``gemm``. fp16/bf16 go to the tensor cores; float32 stays IEEE (no TF32).
"""

from __future__ import annotations

import torch
from kernelzoo_plugins._gemm.triton import GemmTritonImplementation, gemm

from kernelzoo.registry import Call

from . import rows


class LinearTriton(GemmTritonImplementation):
    op = "linear"

    def run(self, call: Call, config: dict) -> torch.Tensor:
        x, w, bias = call.inputs["x"], call.inputs["weight"], call.inputs.get("bias")
        out = call.empty((*x.shape[:-1], w.shape[0]))
        if out.numel() == 0:
            return out
        gemm(rows(x), w.t(), out.view(-1, w.shape[0]), bias, config)
        return out
