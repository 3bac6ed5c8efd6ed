"""layer_norm(x, normalized_shape, weight=None, bias=None, eps=1e-5): torch.nn.functional.layer_norm, the
forward pass, fused. Over the last len(normalized_shape) dims (a row of N = prod(normalized_shape)):

    mean = Σ x / N        var = Σ (x − mean)² / N (biased)        rstd = 1 / sqrt(var + eps)
    y = (x − mean) · rstd · weight + bias

Every implementation returns (y, mean, rstd): y in x's dtype and shape, mean and rstd float32 of shape
x.shape[:-len(normalized_shape)] (one per row), which the backward op (layer_norm_backward) needs.
``kernelzoo.ops.layer_norm`` returns y, and records a backward through layer_norm_backward when x,
weight or bias requires grad. Statistics accumulate in float32 whatever x's dtype. A row holding an inf
or NaN gives y, mean and rstd NaN (torch's Welford mean is NaN there too), and so do rows of N = 0.

Kernels see x as (rows, N) with unit column stride (:func:`as_rows`; copied only if it must be). The
op's shape is (rows, N): "8192x8192" for tuning and benchmarks.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import torch
from kernelzoo_plugins._rows.layer_norm import (
    CaseSpec,
    case_inputs,
    check_affine,
    check_eps,
    check_normalized_shape,
    layer_norm_bad_cases,
    layer_norm_cases,
    row_stats,
    widened,
)

# re-exported: what layer_norm's plugins read
from kernelzoo_plugins._rows.layer_norm import as_rows as as_rows
from kernelzoo_plugins._rows.layer_norm import stats_shape as stats_shape

from kernelzoo import ops
from kernelzoo.registry import BadCase, Call, Case, Derivative, Op, check_tensor, randn
from kernelzoo.tolerance import Tolerance


class LayerNorm(Op):
    """layer_norm(x, normalized_shape, weight=None, bias=None, eps=1e-5) -> y (fused; mean and rstd kept for
    the backward)."""

    name = "layer_norm"
    outputs = 3  # y, mean and rstd
    # the derivative: layer_norm_backward from x and the forward's mean and rstd
    derivative = Derivative(
        inputs=("x", "weight", "bias"),
        save=lambda call, outputs: {"x": call.inputs["x"], "weight": call.inputs.get("weight"), "mean": outputs[1],
                                    "rstd": outputs[2], "normalized_shape": call.params["normalized_shape"]},
        backward=lambda saved, grad: dict(zip(("x", "weight", "bias"), ops.layer_norm_backward(
            grad, saved["x"], saved["mean"], saved["rstd"], saved["normalized_shape"], saved["weight"]))),
    )
    # (rows, N): transformer activations (N = 1024 .. 8192) of more than the 50 MB L2 on the GPU
    shapes = {"cuda": [(8192, 8192), (16384, 4096), (4096, 1024), (1024, 65536)],
              "cpu": [(2048, 2048), (4096, 1024), (256, 8192)]}

    def check(self, x: torch.Tensor, normalized_shape: int | Sequence[int], weight: torch.Tensor | None = None,
              bias: torch.Tensor | None = None, eps: float = 1e-5) -> Call:
        check_tensor(self.name, "x", x)
        shape = check_normalized_shape(self.name, x, normalized_shape)
        check_affine(self.name, x, shape, weight=weight, bias=bias)
        inputs = {"x": x, **{k: t for k, t in (("weight", weight), ("bias", bias)) if t is not None}}
        return Call(self, inputs, {"normalized_shape": shape, "eps": check_eps(self.name, eps)})

    def reference(self, call: Call) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        x, shape = call.inputs["x"], call.params["normalized_shape"]
        n = math.prod(shape)
        mean, rstd = row_stats(x, n, call.params["eps"])
        y = (x.double().reshape(-1, n) - mean[:, None]) * rstd[:, None]
        if "weight" in call.inputs:
            y = y * call.inputs["weight"].double().reshape(1, n)
        if "bias" in call.inputs:
            y = y + call.inputs["bias"].double().reshape(1, n)
        if n == 0:
            mean, rstd = mean.fill_(math.nan), rstd.fill_(math.nan)
        stats = stats_shape(x, shape)
        return y.reshape(x.shape), mean.reshape(stats), rstd.reshape(stats)

    def example(self, shape: Sequence[int], dtype: torch.dtype, device: torch.device | str,
                generator: torch.Generator | None = None, affine: bool = True) -> Call:
        """x of shape (rows, N), normalised over N, with a random weight and bias (``affine``)."""
        rows, n = shape
        x = randn((rows, n), device, dtype, generator)
        w = randn((n,), device, dtype, generator) if affine else None
        b = randn((n,), device, dtype, generator) if affine else None
        return self.check(x, n, w, b)

    def sizes(self, call: Call) -> dict[str, int]:
        n = math.prod(call.params["normalized_shape"])
        return {"rows": call.inputs["x"].numel() // n if n else 0, "n": n}

    def flags(self, call: Call) -> str:
        return "-".join(k for k in ("weight", "bias") if k in call.inputs)

    def flops(self, call: Call) -> float:
        return 8.0 * call.inputs["x"].numel()  # sum, deviation, square-add, normalise, scale, shift

    def bytes(self, call: Call) -> float:
        x = call.inputs["x"]
        s = self.sizes(call)
        params = sum(t.numel() * t.element_size() for k, t in call.inputs.items() if k != "x")
        return float(2 * x.numel() * x.element_size() + params + 8 * s["rows"])  # x in, y out, mean and rstd

    def tolerance(self, call: Call) -> Tolerance:
        return widened(call, self.sizes(call)["n"])

    def cases(self) -> list[Case]:
        return layer_norm_cases(_forward_case)

    def bad_cases(self) -> list[BadCase]:
        return layer_norm_bad_cases(self.name, lambda x, *rest: (x, *rest))

    # --- autograd ----------------------------------------------------------------------------
    def result(self, call: Call, outputs: Any) -> torch.Tensor:
        return outputs[0]


# --- conformance cases (shared with layer_norm_backward) -----------------------------------------

def _forward_case(spec: CaseSpec) -> Callable:
    def build(device: torch.device, dtype: torch.dtype, g: torch.Generator) -> tuple[tuple, dict]:
        x, ns, weight, bias = case_inputs(spec, device, dtype, g)
        return (x, ns, weight, bias), {}
    return build


