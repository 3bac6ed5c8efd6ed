"""torch.nn.functional.linear (cuBLAS on the GPU, MKL/oneDNN on the CPU): the baseline."""

from __future__ import annotations

import torch

from kernelzoo.registry import FLOATS, Call, Implementation


class LinearTorch(Implementation):
    op = "linear"
    plugin = "torch"
    dtypes = {"cpu": FLOATS, "cuda": FLOATS}

    def run(self, call: Call, config: dict) -> torch.Tensor:
        i = call.inputs
        return torch.nn.functional.linear(i["x"], i["weight"], i.get("bias"))
