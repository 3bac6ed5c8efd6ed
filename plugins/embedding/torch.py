"""torch.nn.functional.embedding: the baseline."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from kernelzoo.registry import FLOATS, Call, Implementation


class EmbeddingTorch(Implementation):
    op = "embedding"
    plugin = "torch"
    dtypes = {"cpu": FLOATS, "cuda": FLOATS}

    def run(self, call: Call, config: dict) -> torch.Tensor:
        return F.embedding(call.inputs["indices"], call.inputs["weight"], call.params["padding_idx"])
