"""The spec in tensor ops: softmax from lse, minus the smoothed one-hot, times each row's scale, in float32."""

from __future__ import annotations

import torch
from kernelzoo_plugins._rows.cross_entropy import from_rows

from kernelzoo.backends.tensor_ops import PythonImplementation
from kernelzoo.registry import Call

from . import grad_rows, row_scales, rows_of


class CrossEntropyBackwardPython(PythonImplementation):
    op = "cross_entropy_backward"

    def run(self, call: Call, config: dict) -> torch.Tensor:
        x2d, target, lse = rows_of(call)
        p = call.params
        scale = row_scales(call.inputs["grad_loss"], target, p["reduction"], p["ignore_index"], torch.float32)
        grad = grad_rows(x2d, target, lse, scale, p["label_smoothing"], torch.float32)
        return from_rows(grad.to(x2d.dtype).contiguous(), call.inputs["logits"])
