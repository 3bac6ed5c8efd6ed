"""The spec in tensor ops: per row, the mean and the biased variance in float32, then normalise, scale, shift."""

from __future__ import annotations

import math

import torch

from kernelzoo.registry import FLOATS, Call, Implementation

from . import as_rows, stats_shape


class LayerNormPython(Implementation):
    op = "layer_norm"
    plugin = "python"
    # float32 only on the CPU: mean and rstd are float32 for every x dtype, which the conformance suite's
    # one-dtype check of the outputs would reject for 16-bit x
    dtypes = {"cpu": (torch.float32,), "cuda": FLOATS}

    def run(self, call: Call, config: dict) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        x, shape = call.inputs["x"], call.params["normalized_shape"]
        n = math.prod(shape)
        x2d = as_rows(x, n).float()  # (rows, n)
        mean = x2d.mean(1)  # (rows,); NaN for n = 0
        var = (x2d - mean[:, None]).square().mean(1)
        mean = torch.where(var.isnan(), torch.nan, mean)  # a row with an inf: NaN, as torch's Welford mean
        rstd = (var + call.params["eps"]).rsqrt()
        y = (x2d - mean[:, None]) * rstd[:, None]
        if "weight" in call.inputs:
            y = y * call.inputs["weight"].float().reshape(1, n)
        if "bias" in call.inputs:
            y = y + call.inputs["bias"].float().reshape(1, n)
        stats = stats_shape(x, shape)
        return y.to(x.dtype).reshape(x.shape), mean.reshape(stats), rstd.reshape(stats)
