"""The spec in tensor ops: index the table's rows."""

from __future__ import annotations

import torch

from kernelzoo.backends.tensor_ops import PythonImplementation
from kernelzoo.registry import Call


class EmbeddingPython(PythonImplementation):
    op = "embedding"

    def run(self, call: Call, config: dict) -> torch.Tensor:
        return call.inputs["weight"][call.inputs["indices"]]
