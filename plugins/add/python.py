"""The spec in tensor ops: a + alpha·b, broadcast by torch's rules, computed in float32."""

from __future__ import annotations

import torch

from kernelzoo.registry import FLOATS, Call, Implementation


class AddPython(Implementation):
    op = "add"
    plugin = "python"
    dtypes = {"cpu": FLOATS, "cuda": FLOATS}

    def run(self, call: Call, config: dict) -> torch.Tensor:
        # float16/bfloat16 in float32: alpha·b rounded to 16 bits before the sum could cancel badly
        a, b = call.inputs["a"].float(), call.inputs["b"].float()
        return (a + call.params["alpha"] * b).to(call.dtype)
