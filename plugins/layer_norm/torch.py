"""torch.native_layer_norm (what F.layer_norm runs, keeping mean and rstd): the baseline."""

from __future__ import annotations

import math

import torch

from kernelzoo.registry import FLOATS, Call, Implementation

from . import stats_shape


class LayerNormTorch(Implementation):
    op = "layer_norm"
    plugin = "torch"
    dtypes = {"cpu": (torch.float32,), "cuda": FLOATS}  # float32 stats: see the python plugin

    def run(self, call: Call, config: dict) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        x, shape = call.inputs["x"], call.params["normalized_shape"]
        y, mean, rstd = torch.native_layer_norm(x, list(shape), call.inputs.get("weight"), call.inputs.get("bias"),
                                                call.params["eps"])
        stats = stats_shape(x, shape)
        if math.prod(shape) == 0:  # torch gives mean 0 there; the op's mean of nothing is NaN
            mean = torch.full_like(mean, math.nan)
        return y, mean.float().reshape(stats), rstd.float().reshape(stats)
