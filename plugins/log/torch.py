"""torch.log: the baseline."""

from __future__ import annotations

import torch

from kernelzoo.backends.tensor_ops import TorchImplementation
from kernelzoo.registry import Call


class LogTorch(TorchImplementation):
    op = "log"

    def run(self, call: Call, config: dict) -> torch.Tensor:
        return torch.log(call.inputs["x"])
