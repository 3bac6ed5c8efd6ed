"""layer_norm_backward(grad_y, x, mean, rstd, normalized_shape, weight=None) -> (grad_x, grad_weight,
grad_bias): the gradients of the op layer_norm (see its spec) for the output gradient grad_y, from the
forward's saved mean and rstd (float32, one per row of N = prod(normalized_shape) elements):

    x̂ = (x − mean)·rstd        g = grad_y·weight (grad_y without a weight)
    grad_x = rstd·(g − mean(g) − x̂·mean(g·x̂))              (means over the row)
    grad_weight = Σ_rows grad_y·x̂        grad_bias = Σ_rows grad_y

grad_weight and grad_bias (of normalized_shape) are always computed — the gradients of a weight of ones
and a bias of zeros when the forward had none; the autograd function keeps those it needs. All three are
in grad_y's dtype. Their sums over rows are two-stage: each block or program (or thread) adds its rows
into its own float32 partial row, then a second small reduction adds the partials in a fixed order, so
results are deterministic (no atomics).

The op's shape is the forward's (rows, N).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import torch
from kernelzoo_plugins._rows.layer_norm import (
    CaseSpec,
    as_rows,
    case_inputs,
    check_affine,
    check_normalized_shape,
    layer_norm_bad_cases,
    layer_norm_cases,
    row_stats,
    stats_shape,
    widened,
)

from kernelzoo.errors import ArgumentError, DeviceError, DTypeError
from kernelzoo.registry import BadCase, Call, Case, Op, check_same, check_tensor, randn
from kernelzoo.tolerance import Mismatch, Tolerance, verify_each


def forward_stats(x: torch.Tensor, shape: tuple[int, ...], eps: float = 1e-5) -> tuple[torch.Tensor, torch.Tensor]:
    """The forward's (mean, rstd) for backward inputs: computed in float64, stored as float32."""
    mean, rstd = row_stats(x, math.prod(shape), eps)
    stats = stats_shape(x, shape)
    return mean.float().reshape(stats), rstd.float().reshape(stats)


class LayerNormBackward(Op):
    """layer_norm_backward(grad_y, x, mean, rstd, normalized_shape, weight=None) -> (grad_x, grad_weight,
    grad_bias)."""

    name = "layer_norm_backward"
    outputs = 3  # dx, dweight, dbias
    # Untuned on a GPU, the cuda plugin first: tuned, it ran ahead of the Triton plugin at every benchmark shape
    # (docs/perf/layer_norm_backward.md)
    default_order = {"cuda": ("cuda",)}
    shapes = {"cuda": [(8192, 8192), (16384, 4096), (4096, 1024), (1024, 65536)],
              "cpu": [(2048, 2048), (4096, 1024), (256, 8192)]}

    def check(self, grad_y: torch.Tensor, x: torch.Tensor, mean: torch.Tensor, rstd: torch.Tensor,
              normalized_shape: int | Sequence[int], weight: torch.Tensor | None = None) -> Call:
        check_tensor(self.name, "grad_y", grad_y)
        check_tensor(self.name, "x", x)
        shape = check_normalized_shape(self.name, x, normalized_shape)
        check_same(self.name, grad_y=grad_y, x=x)
        if grad_y.shape != x.shape:
            raise ArgumentError(f"{self.name}: grad_y of shape {tuple(grad_y.shape)} must have x's shape "
                                f"{tuple(x.shape)}")
        check_affine(self.name, x, shape, weight=weight)
        stats = stats_shape(x, shape)
        for name, t in (("mean", mean), ("rstd", rstd)):
            check_tensor(self.name, name, t, (torch.float32,))
            if t.device != x.device:
                raise DeviceError(f"{self.name}: x is on {x.device} but {name} is on {t.device}; expected one device")
            if tuple(t.shape) != stats and t.numel() != math.prod(stats):
                raise ArgumentError(f"{self.name}: {name} of shape {tuple(t.shape)} must hold one value per row: "
                                    f"x.shape[:-{len(shape)}] = {stats}")
        inputs = {"grad_y": grad_y, "x": x, "mean": mean, "rstd": rstd}
        if weight is not None:
            inputs["weight"] = weight
        return Call(self, inputs, {"normalized_shape": shape})

    def reference(self, call: Call) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        i, shape = call.inputs, call.params["normalized_shape"]
        n = math.prod(shape)
        dy = i["grad_y"].double().reshape(-1, n)
        xhat = (i["x"].double().reshape(-1, n) - i["mean"].double().reshape(-1, 1)) * i["rstd"].double().reshape(-1, 1)
        g = dy * i["weight"].double().reshape(1, n) if "weight" in i else dy
        dx = i["rstd"].double().reshape(-1, 1) * (g - g.mean(1, keepdim=True) - xhat * (g * xhat).mean(1, keepdim=True))
        return (dx.reshape(i["x"].shape), (dy * xhat).sum(0).reshape(shape), dy.sum(0).reshape(shape))

    def example(self, shape: Sequence[int], dtype: torch.dtype, device: torch.device | str,
                generator: torch.Generator | None = None, affine: bool = True) -> Call:
        """x, grad_y of shape (rows, N), the forward's mean and rstd, and a random weight (``affine``)."""
        rows, n = shape
        x = randn((rows, n), device, dtype, generator)
        mean, rstd = forward_stats(x, (n,))
        weight = randn((n,), device, dtype, generator) if affine else None
        return self.check(randn((rows, n), device, dtype, generator), x, mean, rstd, n, weight)

    def sizes(self, call: Call) -> dict[str, int]:
        n = math.prod(call.params["normalized_shape"])
        return {"rows": call.inputs["x"].numel() // n if n else 0, "n": n}

    def flags(self, call: Call) -> str:
        return "weight" if "weight" in call.inputs else ""

    def flops(self, call: Call) -> float:
        return 14.0 * call.inputs["x"].numel()

    def bytes(self, call: Call) -> float:
        x = call.inputs["x"]
        s = self.sizes(call)
        per_n = (1 + 2) * x.element_size() * s["n"] if "weight" in call.inputs else 2 * x.element_size() * s["n"]
        return float(3 * x.numel() * x.element_size() + 8 * s["rows"] + per_n)  # grad_y, x in, grad_x out

    def tolerances(self, call: Call) -> tuple[Tolerance, Tolerance]:
        """(grad_x's, grad_weight's and grad_bias's). grad_x holds means over a row of N terms (see
        layer_norm's). grad_weight and grad_bias sum `rows` float32 terms; a sequential accumulator (torch's
        CPU kernel) leaves an absolute error of std ~0.35·u·rows (u = 2^-24; the partial sums grow like
        sqrt(k), each rounding adds u/2 of one), the worst of 64 outputs ~u·rows (measured 0.74·u·rows at
        4099 rows): 3·u·rows covers it."""
        s = self.sizes(call)
        dx = widened(call, s["n"])
        sums = widened(call, s["rows"])
        return dx, Tolerance(sums.rtol, max(sums.atol, 3 * 2**-24 * s["rows"]))

    def tolerance(self, call: Call) -> Tolerance:
        # the loosest of the outputs', for checks that apply one to all; verify() applies each its own
        dx, sums = self.tolerances(call)
        return Tolerance(max(dx.rtol, sums.rtol), max(dx.atol, sums.atol))

    def verify(self, call: Call, outputs: Any, reference: Any) -> Mismatch | None:
        if not isinstance(outputs, tuple) or len(outputs) != 3:
            return Mismatch("expected the outputs (grad_x, grad_weight, grad_bias)")
        dx_tol, sums_tol = self.tolerances(call)
        return verify_each(call, outputs, reference, ("grad_x", "grad_weight", "grad_bias"),
                           (dx_tol, sums_tol, sums_tol))

    def cases(self) -> list[Case]:
        return layer_norm_cases(_backward_case)

    def bad_cases(self) -> list[BadCase]:
        def args(x: Any, shape: Any, weight: Any, bias: Any) -> tuple:
            rows = x.shape[:-1] if isinstance(x, torch.Tensor) and x.dim() else (1,)
            return (x, x, torch.zeros(rows), torch.ones(rows), shape, weight)
        own = ("bias-dtype", "int-dtype", "not-a-tensor")  # no bias here; grad_y is checked first
        bad = [b for b in layer_norm_bad_cases(self.name, args) if b.id not in own]
        x, int_x = torch.zeros(4, 5), torch.zeros(4, 5, dtype=torch.int64)
        return [
            *bad,
            BadCase("int-dtype", lambda: ((int_x, x, torch.zeros(4), torch.ones(4), 5), {}), DTypeError,
                    "grad_y must be float32, float16, bfloat16, got torch.int64"),
            BadCase("not-a-tensor", lambda: (([[1.0]], x, torch.zeros(4), torch.ones(4), 5), {}), ArgumentError,
                    "grad_y must be a torch.Tensor, got list"),
            BadCase("grad-shape", lambda: ((torch.zeros(4, 6), x, torch.zeros(4), torch.ones(4), 5), {}),
                    ArgumentError, "grad_y of shape (4, 6) must have x's shape (4, 5)"),
            BadCase("mean-dtype", lambda: ((x, x, torch.zeros(4, dtype=torch.float16), torch.ones(4), 5), {}),
                    DTypeError, "mean must be float32, got torch.float16"),
            BadCase("rstd-shape", lambda: ((x, x, torch.zeros(4), torch.ones(5), 5), {}), ArgumentError,
                    "rstd of shape (5,) must hold one value per row: x.shape[:-1] = (4,)"),
        ]


def _backward_case(spec: CaseSpec) -> Callable:
    def build(device: torch.device, dtype: torch.dtype, g: torch.Generator) -> tuple[tuple, dict]:
        x, ns, weight, _ = case_inputs(spec, device, dtype, g)
        mean, rstd = forward_stats(x, ns)
        grad_y = randn(x.shape, device, dtype, g)
        if spec[3] == "transposed":  # grad_y in another layout than x
            grad_y = randn(tuple(reversed(x.shape)), device, dtype, g).t()
        return (grad_y, x, mean, rstd, ns, weight), {}
    return build


def rows_of(call: Call) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, int]:
    """(grad_y, x) as (rows, N) with column stride 1, mean and rstd as contiguous (rows,), and N."""
    n = math.prod(call.params["normalized_shape"])
    i = call.inputs
    return (as_rows(i["grad_y"], n), as_rows(i["x"], n), i["mean"].reshape(-1).contiguous(),
            i["rstd"].reshape(-1).contiguous(), n)
