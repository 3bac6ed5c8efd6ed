"""torch.matmul (cuBLAS on the GPU, MKL/oneDNN on the CPU): the baseline."""

from __future__ import annotations

import torch

from kernelzoo.registry import FLOATS, Call, Implementation


class MatmulTorch(Implementation):
    op = "matmul"
    plugin = "torch"
    dtypes = {"cpu": FLOATS, "cuda": FLOATS}

    def run(self, call: Call, config: dict) -> torch.Tensor:
        return torch.matmul(call.inputs["a"], call.inputs["b"])
