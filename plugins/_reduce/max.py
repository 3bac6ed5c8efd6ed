"""What max and max_backward share: the (outer, reduced, inner) plan of a reduction over one dim, the dim and
keepdim checks, the comparison of argmax indices (and of a (values, indices) pair, as max_pool2d's too), the
conformance cases, and :func:`index_output`, the int64
index output that max and max_pool2d allocate."""

from __future__ import annotations

import math
import operator
from collections.abc import Callable, Sequence
from typing import Any

import torch
from kernelzoo_plugins._reduce.plan import INTERPRETER_MAX_ELEMENTS, Plan

from kernelzoo.errors import ArgumentError
from kernelzoo.registry import Call, Case, randn
from kernelzoo.tolerance import Mismatch, Tolerance, check_close


def index_output(call: Call, shape: Sequence[int]) -> torch.Tensor:
    """An int64 output. Call.empty poisons outputs with NaN for the conformance tests, which int64 cannot
    hold (it raises): such a run gets -1, never a valid index, in every element instead."""
    try:
        return call.empty(shape, dtype=torch.int64)
    except RuntimeError:
        return torch.full(tuple(shape), -1, dtype=torch.int64, device=call.device)


def plan(shape: Sequence[int], dim: int | None, keepdim: bool) -> Plan:
    """The (outer, reduced, inner) view of reducing ``shape`` over ``dim`` (normalised; None for all)."""
    if dim is None:
        return Plan(1, math.prod(shape), 1, None, ())
    if not shape:  # a 0-dim tensor: its one element
        return Plan(1, 1, 1, None, ())
    out_shape = tuple(1 if d == dim else n for d, n in enumerate(shape) if keepdim or d != dim)
    return Plan(math.prod(shape[:dim]), shape[dim], math.prod(shape[dim + 1:]), None, out_shape)


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


def compare_with_indices(call: Call, outputs: Any, reference: Any, tolerance: Tolerance,
                         name: str = "values") -> Mismatch | None:
    """None if ``outputs`` are (values, indices) on the call's device, the values of the call's dtype and within
    ``tolerance`` of the reference's, the indices equal to its; ``name`` is what the op calls its values."""
    if not isinstance(outputs, tuple) or len(outputs) != 2:
        return Mismatch(f"expected the outputs ({name}, indices)")
    (values, indices), (ref, ref_indices) = outputs, reference
    if values.device != call.device or indices.device != call.device:
        return Mismatch(f"outputs on {values.device} and {indices.device}, expected {call.device}")
    if values.dtype != call.dtype:
        return Mismatch(f"{name}: {values.dtype}, expected {call.dtype}")
    mismatch = check_close(values, ref, tolerance)
    if mismatch is not None:
        return Mismatch(f"{name}: {mismatch}")
    return compare_indices(indices, ref_indices)


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
