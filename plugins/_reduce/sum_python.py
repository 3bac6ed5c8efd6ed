"""The spec of sum and mean in tensor ops: x as (outer, reduced, inner), summed over the middle dim in float32,
scaled (mean), rounded to x's dtype."""

from __future__ import annotations

import torch
from kernelzoo_plugins._reduce.plan import as_3d

from kernelzoo.backends.tensor_ops import PythonImplementation
from kernelzoo.registry import Call


class SummationPython(PythonImplementation):
    """Base of sum's and mean's python plugins: the op's scale (1, or 1/reduced) applied to the float32 sum."""

    def run(self, call: Call, config: dict) -> torch.Tensor:
        x = call.inputs["x"]
        p = call.op.plan(call)
        x3 = as_3d(x, p).float()  # (outer, reduced, inner)
        out = x3.sum(1) * call.op.scale(call)  # (outer, inner)
        return out.to(x.dtype).reshape(p.out_shape)
