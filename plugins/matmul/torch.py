"""torch.matmul (cuBLAS on the GPU, MKL/oneDNN on the CPU): the baseline."""

from __future__ import annotations

import torch

from kernelzoo.registry import FLOATS, Call, Implementation


class MatmulTorch(Implementation):
    op = "matmul"
    plugin = "torch"
    # float32 only on the CPU: torch 2.11's bfloat16 CPU matmul (oneDNN) turns some inf·x sums
    # into NaN where the float64 reference has ±inf (64 of 1320 outputs in the NaN/Inf case)
    dtypes = {"cpu": (torch.float32,), "cuda": FLOATS}

    def run(self, call: Call, config: dict) -> torch.Tensor:
        return torch.matmul(call.inputs["a"], call.inputs["b"])
