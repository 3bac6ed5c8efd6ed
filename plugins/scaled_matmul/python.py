"""The spec in tensor ops: dequantize a and b to float32 (each times its scale), multiply, add the bias, cast."""

from __future__ import annotations

import torch

from kernelzoo.backends.tensor_ops import PythonImplementation
from kernelzoo.registry import FP8, Call

from . import dequantized, out_dtype


class ScaledMatmulPython(PythonImplementation):
    op = "scaled_matmul"
    dtypes = {"cpu": FP8, "cuda": FP8}  # a's dtype; the output's is out_dtype

    @torch.no_grad()  # forward only: the output requires no grad, as the compiled plugins' do
    def run(self, call: Call, config: dict) -> torch.Tensor:
        a, b = dequantized(call, torch.float32)  # (M, K), (K, N)
        out = a @ b
        if "bias" in call.inputs:
            out = out + call.inputs["bias"].float()
        return out.to(out_dtype(call))
