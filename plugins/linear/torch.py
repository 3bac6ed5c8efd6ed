"""torch.nn.functional.linear (cuBLAS on the GPU, MKL/oneDNN on the CPU): the baseline."""

from __future__ import annotations

import torch

from kernelzoo.registry import FLOATS, Call, Implementation


class LinearTorch(Implementation):
    op = "linear"
    plugin = "torch"
    # float32 only on the CPU: torch 2.11's bf16 CPU matmul gives NaN where the reference has ±inf (as matmul's)
    dtypes = {"cpu": (torch.float32,), "cuda": FLOATS}

    def run(self, call: Call, config: dict) -> torch.Tensor:
        i = call.inputs
        return torch.nn.functional.linear(i["x"], i["weight"], i.get("bias"))
