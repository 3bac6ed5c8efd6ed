"""torch.div: the baseline."""

from __future__ import annotations

import torch

from kernelzoo.backends.tensor_ops import TorchImplementation
from kernelzoo.registry import Call


class DivTorch(TorchImplementation):
    op = "div"

    def run(self, call: Call, config: dict) -> torch.Tensor:
        return torch.div(call.inputs["a"], call.inputs["b"])
