"""max(x, dim=None, keepdim=False): torch.max's reduction forms.

* dim=None: the 0-dim max of every element (torch.max(x)); x must not be empty.
* dim=int: (values, indices) along ``dim`` (torch.max(x, dim, keepdim)); indices are int64, the FIRST
  index of the maximum, as torch's CPU kernel gives; the dim must not have size 0.

NaN propagates: a NaN is the max, and its index is the first NaN's. A run of only -inf gives -inf at
index 0. Every implementation returns (values, indices); for dim=None indices is the 0-dim flat index
into x (in x's logical, row-major order). ``kernelzoo.ops.max`` returns values for dim=None and the pair
(values, indices), as a ``torch.return_types.max``, for an int dim, and records a backward through the
op max_backward when x requires grad: the gradient goes to the one element each index names (for
dim=None too, where torch.max(x)'s own backward spreads it evenly over every element equal to the max).

Kernels see the reduction as (outer, reduced, inner) over a contiguous copy of x (a view when x is
contiguous): values[a, b] = max_r x[a, r, b]; dim=None is (1, numel, 1). That (outer, reduced, inner)
is the op's shape, as for sum: "8192x8192x1" reduces rows, "1x8192x8192" columns.
"""

from __future__ import annotations

import math
import operator
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from kernelzoo_plugins.max_pool2d import index_output as index_output  # re-exported: int64 outputs

from kernelzoo import ops
from kernelzoo.autograd import contiguous
from kernelzoo.errors import ArgumentError, DTypeError
from kernelzoo.registry import BadCase, Call, Case, Derivative, Op, check_tensor, randn
from kernelzoo.tolerance import Mismatch, check_close

# Elements above this are too slow for Triton's interpreter in CI (its programs run in Python).
INTERPRETER_MAX_ELEMENTS = 200_000


@dataclass(frozen=True)
class Plan:
    """x as a contiguous (outer, reduced, inner), and the shape of values and indices."""

    outer: int
    reduced: int
    inner: int
    out_shape: tuple[int, ...]


def plan(shape: Sequence[int], dim: int | None, keepdim: bool) -> Plan:
    """The (outer, reduced, inner) view of reducing ``shape`` over ``dim`` (normalised; None for all)."""
    if dim is None:
        return Plan(1, math.prod(shape), 1, ())
    if not shape:  # a 0-dim tensor: its one element
        return Plan(1, 1, 1, ())
    out_shape = tuple(1 if d == dim else n for d, n in enumerate(shape) if keepdim or d != dim)
    return Plan(math.prod(shape[:dim]), shape[dim], math.prod(shape[dim + 1:]), out_shape)


def as_3d(x: torch.Tensor, p: Plan) -> torch.Tensor:
    """x as a contiguous (outer, reduced, inner) tensor (a view when x is contiguous)."""
    return x.contiguous().view(p.outer, p.reduced, p.inner)


def normalise_dim(op: str, dim: Any, ndim: int) -> int | None:
    """None, or ``dim`` in [0, ndim) (0 for a 0-dim tensor, which takes 0 and -1 as in torch)."""
    if dim is None:
        return None
    if isinstance(dim, bool) or not hasattr(type(dim), "__index__"):  # numpy integers welcome
        raise ArgumentError(f"{op}: dim must be None or an int, got {dim!r}")
    dim = operator.index(dim)
    rank = max(ndim, 1)
    if not -rank <= dim < rank:
        raise ArgumentError(f"{op}: dim must be in [{-rank}, {rank - 1}] for x of {ndim} dims, got {dim}")
    return dim % rank


def check_keepdim(op: str, dim: int | None, keepdim: Any) -> bool:
    if not isinstance(keepdim, bool):
        raise ArgumentError(f"{op}: keepdim must be a bool, got {keepdim!r}")
    if keepdim and dim is None:  # torch.max(x, keepdim=True) is no valid call either
        raise ArgumentError(f"{op}: keepdim=True needs an int dim; with dim=None the result is 0-dim")
    return keepdim


def check_reduction(op: str, shape: Sequence[int], dim: int | None, name: str = "x") -> None:
    """torch refuses a max over nothing: an empty tensor with dim=None, or a dim of size 0."""
    if dim is None and math.prod(shape) == 0:
        raise ArgumentError(f"{op}: {name} of shape {tuple(shape)} is empty; a max over all elements needs at "
                            "least one (pass an int dim)")
    if dim is not None and shape and shape[dim] == 0:
        raise ArgumentError(f"{op}: {name} of shape {tuple(shape)} has size 0 at dim {dim}; expected a non-empty "
                            "reduction dim")


class Max(Op):
    """max(x, dim=None, keepdim=False) -> values (dim=None) or (values, indices) (implementations:
    always (values, indices))."""

    name = "max"
    outputs = 2  # values and indices
    # the derivative: max_backward scatters the gradient through the saved indices; the indices get none
    derivative = Derivative(
        inputs=("x",),
        save=lambda call, outputs: {"indices": outputs[1], "dim": call.params["dim"], "keepdim": call.params["keepdim"],
                                    "input_shape": tuple(call.inputs["x"].shape)},
        backward=lambda saved, grad: {"x": ops.max_backward(contiguous(grad), saved["indices"], saved["dim"],
                                                       saved["input_shape"], saved["keepdim"])},
        returns=2,
    )
    # (outer, reduced, inner), as sum's: rows and columns of a square activation, everything of it, and
    # logits over a GPT-2 vocabulary (argmax decoding); every GPU one larger than the 50 MB L2
    shapes = {
        "cuda": [(8192, 8192, 1), (1, 8192, 8192), (1, 8192 * 8192, 1), (4096, 50257, 1)],
        "cpu": [(2048, 2048, 1), (1, 2048, 2048), (1, 2048 * 2048, 1), (256, 50257, 1)],
    }

    def check(self, x: torch.Tensor, dim: int | None = None, keepdim: bool = False) -> Call:
        check_tensor(self.name, "x", x)
        dim = normalise_dim(self.name, dim, x.dim())
        keepdim = check_keepdim(self.name, dim, keepdim)
        check_reduction(self.name, x.shape, dim)
        return Call(self, {"x": x}, {"dim": dim, "keepdim": keepdim})

    def plan(self, call: Call) -> Plan:
        return plan(call.inputs["x"].shape, call.params["dim"], call.params["keepdim"])

    def reference(self, call: Call) -> tuple[torch.Tensor, torch.Tensor]:
        x64, dim = call.inputs["x"].double(), call.params["dim"]
        if dim is None:  # float64 holds every input exactly: ties stay ties
            return tuple(torch.max(x64.reshape(-1), 0))
        return tuple(torch.max(x64, dim, call.params["keepdim"]))

    def verify(self, call: Call, outputs: Any, reference: Any) -> Mismatch | None:
        if not isinstance(outputs, tuple) or len(outputs) != 2:
            return Mismatch("expected the outputs (values, indices)")
        (values, indices), (ref, ref_indices) = outputs, reference
        if values.device != call.device or indices.device != call.device:
            return Mismatch(f"outputs on {values.device} and {indices.device}, expected {call.device}")
        if values.dtype != call.dtype:
            return Mismatch(f"values are {values.dtype}, expected {call.dtype}")
        mismatch = check_close(values, ref, self.tolerance(call))
        if mismatch is not None:
            return Mismatch(f"values: {mismatch}")
        return compare_indices(indices, ref_indices)

    def example(self, shape: Sequence[int], dtype: torch.dtype, device: torch.device | str,
                generator: torch.Generator | None = None) -> Call:
        """x of shape (outer, reduced, inner) reduced over its middle dim."""
        if len(shape) != 3:
            raise ArgumentError(f"{self.name}: example shapes are (outer, reduced, inner), got {tuple(shape)}")
        return self.check(randn(shape, device, dtype, generator), dim=1)

    def sizes(self, call: Call) -> dict[str, int]:
        p = self.plan(call)
        return {"outer": p.outer, "reduced": p.reduced, "inner": p.inner}

    def flops(self, call: Call) -> float:
        return float(call.inputs["x"].numel())  # one comparison per element

    def bytes(self, call: Call) -> float:
        x, p = call.inputs["x"], self.plan(call)
        return float(x.numel() * x.element_size() + p.outer * p.inner * (x.element_size() + 8))

    def cases(self) -> list[Case]:
        return max_cases(_forward_case)

    def bad_cases(self) -> list[BadCase]:
        x = torch.zeros(2, 3)
        return [
            BadCase("int-dtype", lambda: ((torch.arange(4),), {}), DTypeError,
                    "x must be float32, float16, bfloat16, got torch.int64"),
            BadCase("not-a-tensor", lambda: (([1.0, 2.0],), {}), ArgumentError, "x must be a torch.Tensor, got list"),
            BadCase("dim-out-of-range", lambda: ((x,), {"dim": 2}), ArgumentError,
                    "dim must be in [-2, 1] for x of 2 dims, got 2"),
            BadCase("dim-out-of-range-scalar", lambda: ((torch.zeros(()),), {"dim": 1}), ArgumentError,
                    "dim must be in [-1, 0] for x of 0 dims, got 1"),
            BadCase("dim-tuple", lambda: ((x,), {"dim": (0, 1)}), ArgumentError,
                    "dim must be None or an int, got (0, 1)"),
            BadCase("dim-float", lambda: ((x,), {"dim": 1.0}), ArgumentError, "dim must be None or an int, got 1.0"),
            BadCase("keepdim-int", lambda: ((x,), {"dim": 1, "keepdim": 1}), ArgumentError,
                    "keepdim must be a bool, got 1"),
            BadCase("keepdim-without-dim", lambda: ((x,), {"keepdim": True}), ArgumentError,
                    "keepdim=True needs an int dim"),
            BadCase("empty-all", lambda: ((torch.zeros(0, 3),), {}), ArgumentError,
                    "x of shape (0, 3) is empty; a max over all elements needs at least one"),
            BadCase("empty-dim", lambda: ((torch.zeros(0, 3),), {"dim": 0}), ArgumentError,
                    "x of shape (0, 3) has size 0 at dim 0; expected a non-empty reduction dim"),
        ]

    # --- autograd ----------------------------------------------------------------------------
    def result(self, call: Call, outputs: Any) -> Any:
        values, indices = outputs
        if call.params["dim"] is None:
            return values
        return torch.return_types.max((values, indices))


def compare_indices(indices: torch.Tensor, ref: torch.Tensor) -> Mismatch | None:
    """None if ``indices`` are int64 and equal ``ref`` element for element."""
    if indices.dtype != torch.int64 or indices.shape != ref.shape:
        return Mismatch(f"indices: {indices.dtype} of shape {tuple(indices.shape)}, expected int64 of shape "
                        f"{tuple(ref.shape)}")
    wrong = indices.cpu() != ref.cpu()
    if bool(wrong.any()):
        at = tuple(int(i) for i in wrong.nonzero()[0])
        return Mismatch(f"indices: {int(wrong.sum())} of {indices.numel()} differ, first at {at}: "
                        f"{int(indices.cpu()[at])}, expected {int(ref.cpu()[at])}")
    return None


# --- conformance cases (shared with max_backward) ---------------------------------------------

# (id, shape of x, layout, dim, keepdim)
CaseSpec = tuple[str, tuple[int, ...], str, "int | None", bool]


def case_specs() -> list[CaseSpec]:
    """Odd sizes (1, 17, 4099, 100003 against any block), rows, columns, middle dims and everything; long
    runs split into chunks; empty outputs; views; ties and NaN/inf at block and chunk boundaries."""
    def c(shape: tuple[int, ...], dim: int | None = None, keepdim: bool = False, layout: str = "plain") -> CaseSpec:
        label = "x".join(map(str, shape)) or "scalar"
        label = "-".join([*([layout] if layout != "plain" else []), label, "all" if dim is None else f"dim={dim}",
                          *(["keepdim"] if keepdim else [])])
        return label, shape, layout, dim, keepdim
    return [
        c((1,)), c((17,)), c((4099,)), c(()), c((), 0), c((), -1, True),
        c((1023, 17), 1), c((1023, 17), 0), c((17, 1023), -1), c((17, 1023), 0), c((1023, 17)),
        c((257, 4099), 1), c((4099, 257), 0), c((1_000_003,)),
        c((1, 100_003), 1), c((3, 50_257), -1), c((100_003, 2), 0),
        c((7, 33, 5), 0), c((7, 33, 5), 1), c((7, 33, 5), 2, True), c((7, 1, 33, 5), 1),
        c((8, 4096), 1), c((4096, 64), 0),
        c((0, 5), 1), c((5, 0), 0), c((5, 0, 3), 0, True),
        c((17, 1023), 0, layout="transposed"), c((5, 17, 33), 1, layout="transposed"), c((64, 32), 1, layout="sliced"),
        c((33, 17), 0, layout="expanded"), c((33, 17), layout="expanded"),
        c((1023, 17), 1, layout="ties"), c((17, 1023), 0, layout="ties"), c((3, 50_257), 1, layout="ties"),
        c((20_000, 3), 0, layout="ties"), c((100_003,), layout="ties"), c((9, 1025, 5), 1, layout="ties"),
        c((8, 17), 1, layout="nan-inf"), c((8, 4099), 1, layout="nan-inf"), c((8, 4099), 0, layout="nan-inf"),
        c((8, 4099), layout="nan-inf"), c((3, 5000), layout="minus-inf"),
    ]


def case_tensor(shape: tuple[int, ...], layout: str, device: torch.device, dtype: torch.dtype,
                g: torch.Generator) -> torch.Tensor:
    """x of ``shape``: random, or a view ("transposed": a contiguous tensor with its dims reversed; "sliced": every
    other column; "expanded": one row repeated), or "ties" (integers in -2..2: each run holds its max many
    times, across block and chunk boundaries), "nan-inf" (rows with a NaN, two NaNs, NaN after +inf, +inf
    twice, only -inf, -inf then NaN, at the start, middle and end, so every block of a looped kernel meets
    them), "minus-inf" (only -inf: index 0)."""
    if layout == "transposed":
        return randn(tuple(reversed(shape)), device, dtype, g).permute(*reversed(range(len(shape))))
    if layout == "sliced":
        return randn((shape[0], 2 * shape[1] + 2), device, dtype, g)[:, 1:-1:2]
    if layout == "expanded":
        return randn((1, *shape[1:]), device, dtype, g).expand(shape)
    if layout == "ties":
        return torch.randint(-2, 3, shape, generator=g).to(device, dtype)
    if layout == "minus-inf":
        return torch.full(shape, float("-inf"), device=device, dtype=dtype)
    x = randn(shape, "cpu", torch.float32, g)
    if layout == "nan-inf":
        nan, inf = float("nan"), float("inf")
        mid, end = shape[1] // 2, shape[1] - 1
        x[0, mid] = nan
        x[1, 1], x[1, end] = nan, nan
        x[2, 0], x[2, mid] = inf, nan
        x[3, mid], x[3, end] = inf, inf
        x[4] = -inf
        x[5] = -inf
        x[5, end] = nan
        x[6, end] = inf
    return x.to(device, dtype)


def max_cases(make: Callable[[CaseSpec], Callable]) -> list[Case]:
    return [Case(spec[0], make(spec), small=math.prod(spec[1]) <= INTERPRETER_MAX_ELEMENTS) for spec in case_specs()]


def _forward_case(spec: CaseSpec) -> Callable:
    _, shape, layout, dim, keepdim = spec

    def build(device: torch.device, dtype: torch.dtype, g: torch.Generator) -> tuple[tuple, dict]:
        return (case_tensor(shape, layout, device, dtype, g),), {"dim": dim, "keepdim": keepdim}
    return build
