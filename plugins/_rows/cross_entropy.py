"""What cross_entropy and cross_entropy_backward share: the target and option checks, the logits as (rows, C)
with unit class stride and back (:func:`as_rows`, :func:`from_rows`), the float64 row losses and log-sum-exp of
the references, the tolerance widened with the row length, and the conformance and bad cases."""

from __future__ import annotations

import math
import numbers
from collections.abc import Callable, Sequence
from typing import Any

import torch

from kernelzoo.errors import ArgumentError, DeviceError, DTypeError
from kernelzoo.registry import BadCase, Call, Case, Op, check_tensor, randn, value_range
from kernelzoo.tolerance import Tolerance, tolerance_for

REDUCTIONS = ("none", "mean", "sum")
# Elements above this are too slow for Triton's interpreter in CI (its programs run in Python).
INTERPRETER_MAX_ELEMENTS = 100_000


def as_rows(logits: torch.Tensor) -> torch.Tensor:
    """The logits as (rows, C) with class stride 1 (the class dim moved last; a view when it can be)."""
    if logits.dim() == 1:
        return logits.view(1, -1) if logits.stride(0) == 1 else logits.contiguous().view(1, -1)
    moved = logits if logits.dim() == 2 else logits.movedim(1, -1)
    x2d = moved.reshape(-1, logits.shape[1])
    if x2d.shape[1] > 1 and x2d.stride(1) != 1:
        x2d = x2d.contiguous()
    return x2d


def from_rows(g2d: torch.Tensor, logits: torch.Tensor) -> torch.Tensor:
    """A (rows, C) result back in the logits' shape (a view; not contiguous for (N, C, d1, ...))."""
    if logits.dim() <= 2:
        return g2d.view(logits.shape)
    return g2d.view(logits.movedim(1, -1).shape).movedim(-1, 1)


def check_target(op: str, logits: Any, target: Any, ignore_index: Any) -> int:
    """Check logits and target against each other; the number of classes C."""
    check_tensor(op, "logits", logits)
    if not isinstance(target, torch.Tensor):
        raise ArgumentError(f"{op}: target must be a torch.Tensor of class indices, got {type(target).__name__}")
    if target.is_floating_point():
        raise DTypeError(f"{op}: target must be int64 class indices; class-probability targets ({target.dtype}) "
                         "are not supported")
    if target.dtype != torch.int64:
        raise DTypeError(f"{op}: target must be int64 class indices, got {target.dtype}")
    if target.device != logits.device:
        raise DeviceError(f"{op}: logits are on {logits.device} but target is on {target.device}; "
                          "expected one device")
    if logits.dim() == 0:
        raise ArgumentError(f"{op}: logits must be (N, C), (N, C, d1, ...) or (C,), got a 0-dim tensor")
    expected = () if logits.dim() == 1 else (logits.shape[0], *logits.shape[2:])
    if tuple(target.shape) != expected:
        raise ArgumentError(f"{op}: target of shape {tuple(target.shape)} does not match logits of shape "
                            f"{tuple(logits.shape)}; expected target of shape {expected}")
    classes = logits.shape[0] if logits.dim() == 1 else logits.shape[1]
    if classes == 0:
        raise ArgumentError(f"{op}: logits have 0 classes; expected at least 1")
    if isinstance(ignore_index, bool) or not isinstance(ignore_index, numbers.Integral):
        raise ArgumentError(f"{op}: ignore_index must be an int, got {ignore_index!r}")
    # one host sync per target tensor (remembered for the backward); torch's GPU kernels assert instead. A fake
    # target (torch.compile's tracing) has no values to read: the real call checks them.
    if target.numel() and (found := value_range(target, ignore=ignore_index)) is not None:
        low, high = found
        if low < 0 or high >= classes:
            bad = low if low < 0 else high
            raise ArgumentError(f"{op}: target holds class {bad}, outside [0, {classes}) and not "
                                f"ignore_index={ignore_index}")
    return classes


def check_options(op: str, reduction: Any, label_smoothing: Any) -> dict[str, Any]:
    if reduction not in REDUCTIONS:
        raise ArgumentError(f"{op}: reduction must be one of {', '.join(map(repr, REDUCTIONS))}, got {reduction!r}")
    if isinstance(label_smoothing, bool) or not isinstance(label_smoothing, (int, float)) \
            or not 0.0 <= label_smoothing <= 1.0:
        raise ArgumentError(f"{op}: label_smoothing must be a number in [0, 1], got {label_smoothing!r}")
    return {"reduction": reduction, "label_smoothing": float(label_smoothing)}


def row_losses(x: torch.Tensor, t: torch.Tensor, ignore_index: int, smoothing: float,
               dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(loss_i, lse_i, valid_i) per row of x (rows, C) and t (rows,), computed in ``dtype``."""
    x = x.to(dtype)
    lse = log_sum_exp(x)
    valid = t != ignore_index
    picked = x.gather(1, torch.where(valid, t, 0)[:, None])[:, 0]
    loss = lse - picked
    if smoothing:
        loss = (1 - smoothing) * loss + smoothing * (lse - x.mean(1))
    return torch.where(valid, loss, 0.0), lse, valid


def log_sum_exp(x: torch.Tensor) -> torch.Tensor:
    """m + log Σ exp(x − m) per row, m the row's max, as torch's log_softmax takes it: NaN for a row holding
    +inf (inf − inf) or only -inf (-inf − -inf) or a NaN — where torch.logsumexp gives ±inf."""
    if not x.shape[0]:
        return x.new_zeros(0)
    m = x.amax(1, keepdim=True)
    return (m + torch.log(torch.exp(x - m).sum(1, keepdim=True)))[:, 0]


def reduce_losses(loss: torch.Tensor, valid: torch.Tensor, reduction: str) -> torch.Tensor:
    if reduction == "none":
        return loss
    total = loss.sum()
    return total / valid.sum() if reduction == "mean" else total


def targets_with(shape: Sequence[int], classes: int, ignored: float, ignore_index: int, device: torch.device | str,
                 g: torch.Generator | None) -> torch.Tensor:
    """Random class indices of ``shape``, a share ``ignored`` of them ignore_index."""
    t = torch.randint(0, classes, tuple(shape), generator=g)
    if ignored:
        t = torch.where(torch.rand(tuple(shape), generator=g) < ignored, ignore_index, t)
    return t.to(device)


def widened(call: Call, length: int) -> Tolerance:
    """The table's tolerance widened for float32 sums of ``length`` terms (the C exponentials of a row, the N
    losses of a batch): the plugins add at most a few thousand terms in one accumulator, then combine
    partials, and the error of such sums grows like sqrt(length)."""
    return tolerance_for(call.dtype).scaled(max(1.0, math.sqrt(length) / 16))


# (id, logits shape, ignored share, layout, keywords). Odd class counts below and above a block's share
# (1, 17, 1023, 4099), long vocabularies (50257, odd: no 16-byte rows; 128256), ignored rows (all of them:
# a NaN mean), label smoothing, each reduction, (N, C, d) logits, views, empty batches, and inf / -inf / NaN.
CaseSpec = tuple[str, tuple[int, ...], float, str, dict]


def case_specs() -> list[CaseSpec]:
    s = 0.1
    return [
        ("1x1", (1, 1), 0.0, "", {}),
        ("17x17", (17, 17), 0.2, "", {}),
        ("1023x17-none", (1023, 17), 0.2, "", {"reduction": "none"}),
        ("17x1023-sum", (17, 1023), 0.2, "", {"reduction": "sum"}),
        ("9x4099-smooth", (9, 4099), 0.2, "", {"label_smoothing": s}),
        ("8x4096-none-smooth", (8, 4096), 0.2, "", {"reduction": "none", "label_smoothing": s}),
        ("64x256-sum-smooth", (64, 256), 0.0, "", {"reduction": "sum", "label_smoothing": 0.3}),
        ("3x50257", (3, 50257), 0.0, "", {}),
        ("2x50257-none-smooth", (2, 50257), 0.0, "", {"reduction": "none", "label_smoothing": s}),
        ("2x128256", (2, 128256), 0.0, "", {}),
        ("4099x5", (4099, 5), 0.1, "", {}),
        ("all-ignored-mean", (7, 33), 1.0, "", {}),
        ("all-ignored-sum-smooth", (7, 33), 1.0, "", {"reduction": "sum", "label_smoothing": s}),
        ("ignore-index-3", (33, 40), 0.0, "", {"ignore_index": 3}),
        ("1d-1023", (1023,), 0.0, "", {}),
        ("1d-1023-none", (1023,), 0.0, "", {"reduction": "none"}),
        ("3d-4x17x9", (4, 17, 9), 0.2, "", {}),
        ("3d-2x1023x5-none", (2, 1023, 5), 0.1, "", {"reduction": "none", "label_smoothing": s}),
        ("transposed", (17, 1023), 0.1, "transposed", {}),
        ("row-sliced", (9, 4100), 0.0, "row-sliced", {"reduction": "none"}),
        ("large-values", (17, 1023), 0.0, "large", {}),
        ("empty-mean", (0, 17), 0.0, "", {}),
        ("empty-sum", (0, 17), 0.0, "", {"reduction": "sum"}),
        ("empty-none", (0, 4099), 0.0, "", {"reduction": "none"}),
        ("inf-nan", (6, 1023), 0.0, "special", {"reduction": "none"}),
        ("inf-nan-smooth", (6, 1023), 0.0, "special", {"reduction": "none", "label_smoothing": s}),
    ]


def case_inputs(spec: CaseSpec, device: torch.device, dtype: torch.dtype,
                g: torch.Generator) -> tuple[torch.Tensor, torch.Tensor, dict]:
    """(logits, target, keywords) of a case."""
    _, shape, ignored, layout, kwargs = spec
    classes = shape[0] if len(shape) == 1 else shape[1]
    target_shape = () if len(shape) == 1 else (shape[0], *shape[2:])
    target = targets_with(target_shape, classes, ignored, kwargs.get("ignore_index", -100), device, g)
    if layout == "transposed":
        logits = randn(tuple(reversed(shape)), device, dtype, g).t()
    elif layout == "row-sliced":  # rows 4100 apart from an odd start: unit class stride, no copy
        logits = randn((shape[0] + 1, shape[1] + 3), device, dtype, g)[1:, 3:]
    elif layout == "large":  # exp overflows without the max subtraction
        logits = randn(shape, device, dtype, g, scale=300.0)
    elif layout == "special":  # +inf at the target, +inf elsewhere, a NaN, a -inf, a row of -inf, plain rows
        x = randn(shape, "cpu", torch.float32, g)
        target = torch.tensor([5, 6, 7, 8, 9, 10])
        x[0, 5], x[1, 1000], x[2, 3], x[3, 2], x[4] = math.inf, math.inf, math.nan, -math.inf, -math.inf
        logits, target = x.to(device, dtype), target.to(device)
    else:
        logits = randn(shape, device, dtype, g)
    return logits, target, dict(kwargs)


def cross_entropy_cases(make: Callable[[CaseSpec], Callable]) -> list[Case]:
    return [Case(spec[0], make(spec), small=math.prod(spec[1]) <= INTERPRETER_MAX_ELEMENTS) for spec in case_specs()]


def cross_entropy_bad_cases(op: str, args: Callable[[Any, Any], tuple]) -> list[BadCase]:
    """Arguments both ops must reject; ``args(logits, target)`` gives the op's positional arguments."""
    x, t = torch.zeros(4, 5), torch.tensor([0, 1, 2, 3])

    def bad(logits: Any, target: Any, **kw: Any) -> Callable[[], tuple[tuple, dict]]:
        return lambda: (args(logits, target), kw)
    return [
        BadCase("int-logits", bad(torch.zeros(4, 5, dtype=torch.int64), t), DTypeError,
                "logits must be float32, float16, bfloat16, got torch.int64"),
        BadCase("int32-target", bad(x, t.int()), DTypeError, "target must be int64 class indices, got torch.int32"),
        BadCase("probability-target", bad(x, torch.rand(4, 5)), DTypeError, "class-probability targets"),
        BadCase("target-not-tensor", bad(x, [0, 1, 2, 3]), ArgumentError, "target must be a torch.Tensor"),
        BadCase("batch-mismatch", bad(x, t[:3]), ArgumentError,
                "target of shape (3,) does not match logits of shape (4, 5); expected target of shape (4,)"),
        BadCase("class-out-of-range", bad(x, torch.tensor([0, 1, 5, 3])), ArgumentError,
                "target holds class 5, outside [0, 5) and not ignore_index=-100"),
        BadCase("negative-class", bad(x, torch.tensor([0, -1, 2, 3])), ArgumentError, "target holds class -1"),
        BadCase("bad-reduction", bad(x, t, reduction="avg"), ArgumentError,
                "reduction must be one of 'none', 'mean', 'sum', got 'avg'"),
        BadCase("smoothing-range", bad(x, t, label_smoothing=1.5), ArgumentError,
                "label_smoothing must be a number in [0, 1], got 1.5"),
        BadCase("zero-classes", bad(torch.zeros(4, 0), t), ArgumentError, "logits have 0 classes"),
        BadCase("target-device", bad(x, t.to("meta")), DeviceError, "logits are on cpu but target is on meta"),
    ]


class CrossEntropyOp(Op):
    """What the specs of cross_entropy and cross_entropy_backward share: a call's sizes are its rows and classes,
    its flags the reduction and whether label smoothing is on."""

    def sizes(self, call: Call) -> dict[str, int]:
        logits = call.inputs["logits"]
        return {"rows": call.inputs["target"].numel(), "classes": logits.shape[0 if logits.dim() == 1 else 1]}

    def flags(self, call: Call) -> str:
        p = call.params
        return "-".join(filter(None, [p["reduction"], "smoothing" if p["label_smoothing"] else ""]))
