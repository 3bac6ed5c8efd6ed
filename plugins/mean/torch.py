"""torch.mean: the baseline (float16 / bfloat16 accumulate in float32 inside it)."""

from __future__ import annotations

import torch

from kernelzoo.backends.tensor_ops import TorchImplementation
from kernelzoo.registry import Call


class MeanTorch(TorchImplementation):
    op = "mean"

    def run(self, call: Call, config: dict) -> torch.Tensor:
        x, dim, keepdim = call.inputs["x"], call.params["dim"], call.params["keepdim"]
        return torch.mean(x, dim, keepdim) if dim else x.clone()
