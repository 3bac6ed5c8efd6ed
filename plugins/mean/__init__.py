"""mean(x, dim=None, keepdim=False): the mean over any dims (torch.mean semantics), accumulated in
float32, returned in x's dtype; NaN over zero elements, as in torch.

It is the op sum with the float32 total scaled by 1/reduced before rounding, and shares sum's plan,
shapes, cases and kernels: the spec and each plugin subclass the reduction family's (plugins/_reduce), as
sum's do; see plugins/sum. Its gradient is the output gradient over reduced, expanded back: no kernel.
"""

from __future__ import annotations

import math

from kernelzoo_plugins._reduce.sum import Summation

from kernelzoo.registry import Call


class Mean(Summation):
    """mean(x, dim=None, keepdim=False): Σ over ``dim`` / the elements summed, in float32, in x's dtype."""

    name = "mean"
    # Untuned, torch first: faster than the Triton plugin and than openmp at three of the four benchmark shapes
    # (docs/perf/mean.md)
    default_order = {"cuda": ("torch",), "cpu": ("torch",)}

    def scale(self, call: Call) -> float:
        reduced = self.plan(call).reduced
        return 1.0 / reduced if reduced else math.inf  # 0 · inf = NaN: torch's mean of nothing
