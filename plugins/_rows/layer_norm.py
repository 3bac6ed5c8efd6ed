"""What layer_norm and layer_norm_backward share: the normalized_shape, affine and eps checks, x as (rows, n)
(:func:`as_rows`), the float64 row statistics and their shape, the tolerance widened with the row length, and
the conformance and bad cases."""

from __future__ import annotations

import math
import numbers
from collections.abc import Callable
from typing import Any

import torch

from kernelzoo.errors import ArgumentError, DeviceError, DTypeError
from kernelzoo.registry import BadCase, Call, Case, check_same, check_tensor, randn
from kernelzoo.tolerance import Tolerance, tolerance_for

# Elements above this are too slow for Triton's interpreter in CI (its programs run in Python).
INTERPRETER_MAX_ELEMENTS = 100_000


def as_rows(x: torch.Tensor, n: int) -> torch.Tensor:
    """x as (rows, n) with column stride 1 (a view when it can be; rows may be any stride apart)."""
    rows = x.numel() // n if n else math.prod(x.shape[:x.dim() - 1]) if x.dim() else 1
    x2d = x.reshape(rows, n)
    if n > 1 and x2d.stride(1) != 1:
        x2d = x2d.contiguous()
    return x2d


def check_normalized_shape(op: str, x: torch.Tensor, normalized_shape: Any) -> tuple[int, ...]:
    """normalized_shape as a tuple that must equal x's trailing dims, as torch requires."""
    def is_int(n: Any) -> bool:
        return isinstance(n, numbers.Integral) and not isinstance(n, bool)
    items = (normalized_shape,) if is_int(normalized_shape) else normalized_shape
    if not isinstance(items, (tuple, list)) or not items or not all(is_int(n) for n in items):
        raise ArgumentError(f"{op}: normalized_shape must be an int or a non-empty sequence of ints, "
                            f"got {normalized_shape!r}")
    shape = tuple(int(n) for n in items)
    if x.dim() < len(shape) or tuple(x.shape[x.dim() - len(shape):]) != shape:
        raise ArgumentError(f"{op}: normalized_shape={list(shape)} must equal x's trailing dims; expected x of "
                            f"shape [*, {', '.join(map(str, shape))}], got {list(x.shape)}")
    return shape


def check_affine(op: str, x: torch.Tensor, shape: tuple[int, ...], **tensors: Any) -> None:
    """weight / bias (None skipped): of normalized_shape, x's dtype and device."""
    for name, t in tensors.items():
        if t is None:
            continue
        check_tensor(op, name, t)
        check_same(op, x=x, **{name: t})
        if tuple(t.shape) != shape:
            raise ArgumentError(f"{op}: {name} of shape {tuple(t.shape)} must have normalized_shape {shape}")


def check_eps(op: str, eps: Any) -> float:
    if isinstance(eps, bool) or not isinstance(eps, (int, float)) or not math.isfinite(eps) or eps < 0:
        raise ArgumentError(f"{op}: eps must be a finite number >= 0, got {eps!r}")
    return float(eps)


def row_stats(x: torch.Tensor, n: int, eps: float) -> tuple[torch.Tensor, torch.Tensor]:
    """(mean, rstd) per row of x over its last dims of n elements, in float64; NaN both where the row holds
    an inf or NaN (torch's Welford mean is NaN there, not ±inf)."""
    x2d = x.double().reshape(-1, n)
    mean = x2d.mean(1)
    var = (x2d - mean[:, None]).square().mean(1)
    return torch.where(var.isnan(), math.nan, mean), (var + eps).rsqrt()


def stats_shape(x: torch.Tensor, shape: tuple[int, ...]) -> tuple[int, ...]:
    return tuple(x.shape[:x.dim() - len(shape)])


def widened(call: Call, length: int) -> Tolerance:
    """The table's tolerance widened for float32 sums of ``length`` terms: the plugins add at most a few
    thousand terms in one float32 accumulator, then combine partials; the error of a mean, and with it of
    every (x − mean), grows like sqrt(length) (measured below 1e-5·sqrt(length)/16 up to length 65536)."""
    return tolerance_for(call.dtype).scaled(max(1.0, math.sqrt(length) / 16))


# (id, x shape, normalized_shape, layout, weight, bias, offset): odd N below and above a warp's and a
# block's share (1, 17, 1023, 4099), rows of 65536 (looped kernels), more long rows than the backward's grid
# of clusters takes at once (67 x 20000: a cluster loops), several normalised dims, no affine,
# views, empty batches, and an offset (mean ≫ std) that breaks the naive E[x²] − E[x]² variance.
CaseSpec = tuple[str, tuple[int, ...], tuple[int, ...], str, bool, bool, float]


def case_specs() -> list[CaseSpec]:
    return [
        ("1x1", (1, 1), (1,), "", True, True, 0.0),
        ("17x17", (17, 17), (17,), "", True, True, 0.0),
        ("1023x17", (1023, 17), (17,), "", True, True, 0.0),
        ("17x1023", (17, 1023), (1023,), "", True, True, 0.0),
        ("9x4099", (9, 4099), (4099,), "", True, True, 0.0),
        ("64x256", (64, 256), (256,), "", True, True, 0.0),
        ("8x4096", (8, 4096), (4096,), "", True, False, 0.0),
        ("33x8192", (33, 8192), (8192,), "", True, True, 0.0),
        ("3x65536", (3, 65536), (65536,), "", True, True, 0.0),
        ("67x20000", (67, 20000), (20000,), "", True, True, 0.0),
        ("2x50257", (2, 50257), (50257,), "", False, False, 0.0),
        ("4099x64", (4099, 64), (64,), "", True, True, 0.0),
        ("no-affine-17x1023", (17, 1023), (1023,), "", False, False, 0.0),
        ("bias-only-33x100", (33, 100), (100,), "", False, True, 0.0),
        ("3d-5x7x33-ns2", (5, 7, 33), (7, 33), "", True, True, 0.0),
        ("3d-4x9x64", (4, 9, 64), (64,), "", True, True, 0.0),
        ("1d-1023", (1023,), (1023,), "", True, True, 0.0),
        ("offset-30-17x4099", (17, 4099), (4099,), "", True, True, 30.0),
        ("offset-30-2x65536", (2, 65536), (65536,), "", True, True, 30.0),
        ("transposed", (17, 1023), (17,), "transposed", True, True, 0.0),
        ("row-sliced", (9, 4103), (4100,), "row-sliced", True, True, 0.0),
        ("sliced", (64, 33), (33,), "sliced", True, True, 0.0),
        ("empty-0x17", (0, 17), (17,), "", True, True, 0.0),
        ("empty-0x4099", (0, 4099), (4099,), "", True, True, 0.0),
        ("nan-inf", (6, 1023), (1023,), "nan", True, True, 0.0),
    ]


def case_tensor(shape: tuple[int, ...], layout: str, device: torch.device, dtype: torch.dtype,
                g: torch.Generator, offset: float = 0.0) -> torch.Tensor:
    """A random tensor of ``shape``: contiguous, or a view ('transposed': a .t() of the transposed shape;
    'row-sliced': rows 4103 apart from an odd start, no copy needed; 'sliced': every other column), or
    with NaN/inf in some rows ('nan')."""
    if layout == "transposed":
        return (randn(tuple(reversed(shape)), "cpu", torch.float32, g) + offset).to(device, dtype).t()
    if layout == "row-sliced":
        return (randn((shape[0] + 1, shape[1]), "cpu", torch.float32, g) + offset).to(device, dtype)[1:, 3:]
    if layout == "sliced":
        return (randn((shape[0], 2 * shape[1]), "cpu", torch.float32, g) + offset).to(device, dtype)[:, ::2]
    x = randn(shape, "cpu", torch.float32, g) + offset
    if layout == "nan":
        x[0, 5], x[1, 1000], x[2, 0], x[3, 3], x[3, 700] = math.nan, math.inf, -math.inf, math.inf, -math.inf
    return x.to(device, dtype)


def case_inputs(spec: CaseSpec, device: torch.device, dtype: torch.dtype,
                g: torch.Generator) -> tuple[torch.Tensor, tuple[int, ...], torch.Tensor | None, torch.Tensor | None]:
    """(x, normalized_shape, weight, bias) of a case."""
    _, shape, ns, layout, has_weight, has_bias, offset = spec
    x = case_tensor(shape, layout, device, dtype, g, offset)
    ns = tuple(x.shape[x.dim() - len(ns):])
    weight = randn(ns, device, dtype, g) if has_weight else None
    bias = randn(ns, device, dtype, g) if has_bias else None
    return x, ns, weight, bias


def layer_norm_cases(make: Callable[[CaseSpec], Callable]) -> list[Case]:
    return [Case(spec[0], make(spec), small=math.prod(spec[1]) <= INTERPRETER_MAX_ELEMENTS) for spec in case_specs()]


def layer_norm_bad_cases(op: str, args: Callable[..., tuple]) -> list[BadCase]:
    """Arguments both ops must reject; ``args(x, normalized_shape, weight, bias)`` gives the op's own."""
    x = torch.zeros(4, 5)

    def bad(*a: Any, **kw: Any) -> Callable[[], tuple[tuple, dict]]:
        return lambda: (args(*a), kw)
    return [
        BadCase("int-dtype", bad(torch.zeros(4, 5, dtype=torch.int64), 5, None, None), DTypeError,
                "x must be float32, float16, bfloat16, got torch.int64"),
        BadCase("not-a-tensor", bad([[1.0]], 1, None, None), ArgumentError, "x must be a torch.Tensor, got list"),
        BadCase("shape-mismatch", bad(x, 4, None, None), ArgumentError,
                "normalized_shape=[4] must equal x's trailing dims; expected x of shape [*, 4], got [4, 5]"),
        BadCase("shape-too-long", bad(x, (2, 4, 5), None, None), ArgumentError,
                "normalized_shape=[2, 4, 5] must equal x's trailing dims"),
        BadCase("shape-empty", bad(x, (), None, None), ArgumentError,
                "normalized_shape must be an int or a non-empty sequence of ints, got ()"),
        BadCase("weight-shape", bad(x, 5, torch.ones(4), None), ArgumentError,
                "weight of shape (4,) must have normalized_shape (5,)"),
        BadCase("bias-dtype", bad(x, 5, None, torch.ones(5, dtype=torch.float16)), DTypeError,
                "x is torch.float32 but bias is torch.float16"),
        BadCase("weight-device", bad(x, 5, torch.ones(5, device="meta"), None), DeviceError,
                "x is on cpu but weight is on meta"),
    ]
