"""torch.nn.functional.embedding: the baseline."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from kernelzoo.backends.tensor_ops import TorchImplementation
from kernelzoo.registry import Call


class EmbeddingTorch(TorchImplementation):
    op = "embedding"

    def run(self, call: Call, config: dict) -> torch.Tensor:
        return F.embedding(call.inputs["indices"], call.inputs["weight"], call.params["padding_idx"])
