"""torch.pow(x, exponent): the baseline."""

from __future__ import annotations

import torch

from kernelzoo.registry import FLOATS, Call, Implementation


class PowTorch(Implementation):
    op = "pow"
    plugin = "torch"
    # no float16 on the CPU: torch 2.13's CPU float16 kernel skips the special cases 0.5 and -0.5 that its
    # other kernels take (pow(-inf, 0.5) = inf there, NaN in float32, float64 and on the GPU)
    dtypes = {"cpu": (torch.float32, torch.bfloat16), "cuda": FLOATS}

    def run(self, call: Call, config: dict) -> torch.Tensor:
        return torch.pow(call.inputs["x"], call.params["exponent"])
