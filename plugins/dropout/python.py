"""The spec in tensor ops: the mask from the hash in int64 tensor ops (keep_mask), x · keep / (1 − p) in float32."""

from __future__ import annotations

import torch

from kernelzoo.backends.tensor_ops import PythonImplementation
from kernelzoo.registry import Call

from . import keep_mask, scale


class DropoutPython(PythonImplementation):
    op = "dropout"

    def run(self, call: Call, config: dict) -> torch.Tensor:
        x, p = call.inputs["x"], call.params["p"]
        keep = keep_mask(x.shape, p, call.params["seed"], x.device)
        return (x.float() * keep * scale(p)).to(call.dtype)  # a dropped NaN or inf: · 0 = NaN, as torch
