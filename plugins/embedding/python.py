"""The spec in tensor ops: index the table's rows."""

from __future__ import annotations

import torch

from kernelzoo.registry import FLOATS, Call, Implementation


class EmbeddingPython(Implementation):
    op = "embedding"
    plugin = "python"
    dtypes = {"cpu": FLOATS, "cuda": FLOATS}

    def run(self, call: Call, config: dict) -> torch.Tensor:
        return call.inputs["weight"][call.inputs["indices"]]
