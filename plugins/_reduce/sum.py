"""What sum and mean share: the (outer, reduced, inner) plan of a reduction over any dims and the tensor seen
that way (:func:`as_3d`), and their spec (:class:`Summation`: checks, reference, derivative, tolerance, cases),
which differ only in :meth:`Summation.scale`."""

from __future__ import annotations

import math
import operator
from collections.abc import Callable, Sequence
from typing import Any

import torch
from kernelzoo_plugins._reduce.plan import Plan, ReductionOp

from kernelzoo import ops
from kernelzoo.errors import ArgumentError
from kernelzoo.registry import BadCase, Call, Case, Derivative, check_tensor, randn
from kernelzoo.tolerance import Tolerance, tolerance_for


def plan(shape: Sequence[int], dims: tuple[int, ...], keepdim: bool) -> Plan:
    """The (outer, reduced, inner) view of reducing ``shape`` over ``dims`` (normalised, sorted)."""
    out_shape = tuple(1 if d in dims else n for d, n in enumerate(shape) if keepdim or d not in dims)
    # runs of kept (False) and reduced (True) dims, size-1 dims left out: they move no element
    runs: list[list[Any]] = []
    for d, n in enumerate(shape):
        if n == 1:
            continue
        if runs and runs[-1][0] == (d in dims):
            runs[-1][1] *= n
        else:
            runs.append([d in dims, n])
    reduced_runs = sum(1 for is_reduced, _ in runs if is_reduced)
    reduced = math.prod(shape[d] for d in dims)
    if reduced_runs <= 1:
        first = next((i for i, (is_reduced, _) in enumerate(runs) if is_reduced), len(runs))
        outer = math.prod(n for _, n in runs[:first])
        inner = math.prod(n for is_reduced, n in runs[first + 1:]) if first < len(runs) else 1
        return Plan(outer, reduced, inner, None, out_shape)
    kept = [d for d in range(len(shape)) if d not in dims]
    outer = math.prod(shape[d] for d in kept)
    return Plan(outer, reduced, 1, (*kept, *dims), out_shape)


def _normalise_dims(op: str, dim: Any, ndim: int) -> tuple[int, ...]:
    """Sorted non-negative dims; every dim for None or ()."""
    rank = max(ndim, 1)  # a 0-dim tensor takes dim 0 or -1, as in torch
    if dim is None:
        return tuple(range(ndim))
    items = tuple(dim) if isinstance(dim, (tuple, list)) else (dim,)
    out = []
    for d in items:
        if isinstance(d, bool) or not hasattr(type(d), "__index__"):
            raise ArgumentError(f"{op}: dim must be None, an int or a tuple of ints, got {dim!r}")
        d = operator.index(d)
        if not -rank <= d < rank:
            raise ArgumentError(f"{op}: dim must be in [{-rank}, {rank - 1}] for x of {ndim} dims, got {d}")
        d %= rank
        if d in out:
            raise ArgumentError(f"{op}: dim {d} appears more than once in dim={dim!r}")
        out.append(d)
    if not out:
        return tuple(range(ndim))
    return tuple(sorted(d for d in out if d < ndim))  # a 0-dim tensor's dim 0 names no real dim


def _scaled(grad: torch.Tensor, scale: float) -> torch.Tensor:
    """``grad`` times mean's scale (1 for sum): a multiplication of the small gradient, not of x's size."""
    if scale == 1.0:
        return grad
    return ops.mul(grad, torch.full((), scale, dtype=grad.dtype, device=grad.device))

def _nan_inf(device: torch.device, dtype: torch.dtype, g: torch.Generator) -> torch.Tensor:
    x = randn((9, 1023), "cpu", torch.float32, g)
    x[0, 5], x[1, 1000], x[2, 0], x[3, 3], x[3, 700] = float("nan"), float("inf"), float("-inf"), float("inf"), \
        float("-inf")  # NaN; +inf; -inf; inf - inf = NaN
    return x.to(device, dtype)


def _make(make: Callable[[torch.device, torch.dtype, torch.Generator], torch.Tensor], **kwargs: Any) -> Callable:
    def build(device: torch.device, dtype: torch.dtype, g: torch.Generator) -> tuple[tuple, dict]:
        return (make(device, dtype, g),), dict(kwargs)
    return build


class Summation(ReductionOp):
    """The spec sum and mean share: Σ over ``dim`` in float32 times :meth:`scale`, in x's dtype."""

    # the derivative: the output gradient expanded back over the reduced dims (a view), times mean's scale
    derivative = Derivative(
        inputs=("x",),
        save=lambda call, outputs: {"x_shape": call.inputs["x"].shape, "scale": call.op.scale(call),
                                    "keep_shape": plan(call.inputs["x"].shape, call.params["dim"], True).out_shape},
        backward=lambda saved, grad: {"x": _scaled(grad, saved["scale"]).reshape(saved["keep_shape"]).expand(
            saved["x_shape"])},
    )
    # Untuned, torch first: faster than the Triton plugin and than openmp at three of the four benchmark shapes
    # (docs/perf/sum.md)
    default_order = {"cuda": ("torch",), "cpu": ("torch",)}
    # (outer, reduced, inner): rows, columns and everything of a square activation, and a batch of
    # feature maps reduced over their middle dim; every GPU one larger than the 50 MB L2
    shapes = {
        "cuda": [(8192, 8192, 1), (1, 8192, 8192), (1, 8192 * 8192, 1), (64, 1024, 4096)],
        "cpu": [(2048, 2048, 1), (1, 2048, 2048), (1, 2048 * 2048, 1), (32, 256, 512)],
    }

    def scale(self, call: Call) -> float:
        """What the float32 sum is multiplied by before rounding: 1 (mean: 1/reduced, inf for none)."""
        return 1.0

    def check(self, x: torch.Tensor, dim: int | Sequence[int] | None = None, keepdim: bool = False) -> Call:
        check_tensor(self.name, "x", x)
        if not isinstance(keepdim, bool):
            raise ArgumentError(f"{self.name}: keepdim must be a bool, got {keepdim!r}")
        return Call(self, {"x": x}, {"dim": _normalise_dims(self.name, dim, x.dim()), "keepdim": keepdim})

    def plan(self, call: Call) -> Plan:
        return plan(call.inputs["x"].shape, call.params["dim"], call.params["keepdim"])

    def reference(self, call: Call) -> torch.Tensor:
        x64, p = call.inputs["x"].double(), self.plan(call)
        total = x64.sum(call.params["dim"]) if call.params["dim"] else x64.clone()
        return (total * self.scale(call)).reshape(p.out_shape)

    def bytes(self, call: Call) -> float:
        x, p = call.inputs["x"], self.plan(call)
        return float((x.numel() + p.outer * p.inner) * x.element_size())

    def tolerance(self, call: Call) -> Tolerance:
        # An output sums `reduced` float32 terms. Unit-normal terms give partial sums of ~sqrt(k);
        # the plugins add at most a few thousand terms in one float32 accumulator (then combine
        # partials), each rounding at u = 6e-8 of a partial sum: an absolute error of a few u·sqrt(R)
        # against outputs of ~sqrt(R), also near 0 (cancellation), hence both terms grow with
        # sqrt(R) (measured: below 1e-5·sqrt(R)/8 for R up to 4M on every plugin).
        return tolerance_for(call.dtype).scaled(max(1.0, math.sqrt(self.plan(call).reduced) / 8))

    def cases(self) -> list[Case]:
        def c(shape: tuple[int, ...], small: bool = True, **kw: Any) -> Case:
            label = "x".join(map(str, shape)) or "scalar"
            label += "".join(f"-{k}={v}".replace(" ", "") for k, v in kw.items())
            return Case(label, _make(lambda d, t, g, s=shape: randn(s, d, t, g), **kw), small)
        return [
            c((1,)), c((17,)), c((4099,)), c(()), c((), dim=0),
            c((1023, 17), dim=1), c((1023, 17), dim=0), c((17, 1023), dim=-1), c((17, 1023), dim=0),
            c((257, 4099), dim=1, small=False), c((4099, 257), dim=0, small=False),
            c((1, 100_003), dim=1), c((3, 50_257), dim=-1), c((100_003, 2), dim=0), c((50_000, 3), dim=0),
            c((1023, 17)), c((7, 33, 5), dim=(0, 2)), c((7, 33, 5), dim=1), c((7, 33, 5), dim=(-1, -2)),
            c((7, 33, 5), dim=(0, 1), keepdim=True), c((7, 1, 33, 5), dim=(0, 2)), c((2, 3, 4, 5), dim=(1, 3)),
            c((7, 33, 5), dim=()), c((8, 4096), dim=1), c((4096, 64), dim=0),
            c((0,)), c((0, 5), dim=0), c((0, 5), dim=1), c((5, 0), dim=1), c((5, 0, 3), dim=1, keepdim=True),
            Case("transposed-dim=0", _make(lambda d, t, g: randn((1023, 17), d, t, g).t(), dim=0)),
            Case("sliced-dim=1", _make(lambda d, t, g: randn((64, 66), d, t, g)[:, 1:-1:2], dim=1)),
            Case("expanded-dim=0", _make(lambda d, t, g: randn((1, 17), d, t, g).expand(33, 17), dim=0)),
            Case("nan-inf-dim=1", _make(_nan_inf, dim=1)),
            # 4099 terms near 1: ~4099, past fp16's 2048 where an fp16 accumulator stops counting by 1
            Case("offset-4099", _make(lambda d, t, g: (randn((3, 4099), "cpu", torch.float32, g, 0.1) + 1)
                                      .to(d, t), dim=1)),
        ]

    def bad_cases(self) -> list[BadCase]:
        x = torch.zeros(2, 3)
        return [
            *self.reduction_bad_cases(x),
            BadCase("dim-twice", lambda: ((x,), {"dim": (0, -2)}), ArgumentError, "dim 0 appears more than once"),
            BadCase("dim-float", lambda: ((x,), {"dim": 1.0}), ArgumentError,
                    "dim must be None, an int or a tuple of ints, got 1.0"),
            BadCase("keepdim-int", lambda: ((x,), {"keepdim": 1}), ArgumentError, "keepdim must be a bool, got 1"),
        ]
