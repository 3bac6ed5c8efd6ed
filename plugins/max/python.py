"""The spec in tensor ops: over x as (outer, reduced, inner), the max ignoring NaN, the first index holding
it, and the first NaN's index where a run has one (a NaN is the max)."""

from __future__ import annotations

import torch

from kernelzoo.backends.tensor_ops import PythonImplementation
from kernelzoo.registry import Call

from . import as_3d, index_output


class MaxPython(PythonImplementation):
    op = "max"

    def run(self, call: Call, config: dict) -> tuple[torch.Tensor, torch.Tensor]:
        p = call.op.plan(call)
        values, indices = call.empty(p.out_shape), index_output(call, p.out_shape)
        if values.numel() == 0:
            return values, indices
        x3 = as_3d(call.inputs["x"], p).float()  # (outer, reduced, inner); float32 holds every 16-bit value
        nan = x3.isnan()
        finite_max = x3.masked_fill(nan, float("-inf")).amax(1, keepdim=True)  # (outer, 1, inner)
        r = torch.arange(p.reduced, device=x3.device).view(1, -1, 1)
        first_max = torch.where(x3 == finite_max, r, p.reduced).amin(1)  # (outer, inner)
        first_nan = torch.where(nan, r, p.reduced).amin(1)
        has_nan = first_nan < p.reduced
        values.copy_(torch.where(has_nan, float("nan"), finite_max.squeeze(1)).view(p.out_shape))
        indices.copy_(torch.where(has_nan, first_nan, first_max).view(p.out_shape))
        return values, indices
