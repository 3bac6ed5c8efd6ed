"""torch.max: the baseline (dim=None: over the flattened x, which gives the flat index too)."""

from __future__ import annotations

import torch

from kernelzoo.backends.tensor_ops import TorchImplementation
from kernelzoo.registry import Call


class MaxTorch(TorchImplementation):
    op = "max"

    def run(self, call: Call, config: dict) -> tuple[torch.Tensor, torch.Tensor]:
        x, dim = call.inputs["x"], call.params["dim"]
        if dim is None:
            return tuple(torch.max(x.reshape(-1), 0))
        return tuple(torch.max(x, dim, call.params["keepdim"]))
