"""The spec in tensor ops: a·b, broadcast by torch's rules, computed in float32."""

from __future__ import annotations

import torch

from kernelzoo.registry import FLOATS, Call, Implementation


class MulPython(Implementation):
    op = "mul"
    plugin = "python"
    dtypes = {"cpu": FLOATS, "cuda": FLOATS}

    def run(self, call: Call, config: dict) -> torch.Tensor:
        a, b = call.inputs["a"].float(), call.inputs["b"].float()
        return (a * b).to(call.dtype)
