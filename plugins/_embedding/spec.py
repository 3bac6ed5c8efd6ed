"""What embedding and embedding_backward share: the index dtypes and checks, padding_idx, random indices, and
the conformance and bad cases."""

from __future__ import annotations

import math
import numbers
from collections.abc import Callable, Sequence
from typing import Any

import torch

from kernelzoo.errors import ArgumentError, DeviceError, DTypeError
from kernelzoo.registry import BadCase, Case, randn, value_range

INDEX_DTYPES = (torch.int64, torch.int32)
# Elements above this are too slow for Triton's interpreter in CI (its programs run in Python).
INTERPRETER_MAX_ELEMENTS = 100_000


def check_indices(op: str, indices: Any, num_weights: int, device: torch.device) -> None:
    """indices: an int64 / int32 tensor on ``device``, every value in [0, num_weights) (a host sync the
    first time a tensor is checked: see value_range)."""
    if not isinstance(indices, torch.Tensor):
        raise ArgumentError(f"{op}: indices must be a torch.Tensor, got {type(indices).__name__}")
    if indices.dtype not in INDEX_DTYPES:
        raise DTypeError(f"{op}: indices must be int64 or int32, got {indices.dtype}")
    if indices.device != device:
        raise DeviceError(f"{op}: weight is on {device} but indices are on {indices.device}; expected one device")
    # one host sync per indices tensor (remembered for the backward); fake indices (torch.compile's tracing) have
    # no values to read: the real call checks them
    if indices.numel() and (found := value_range(indices)) is not None:
        low, high = found
        if low < 0 or high >= num_weights:
            bad = low if low < 0 else high
            raise ArgumentError(f"{op}: indices hold {bad}, outside [0, {num_weights}) (the rows of weight)")


def check_padding_idx(op: str, padding_idx: Any, num_weights: int) -> int | None:
    """padding_idx as a row in [0, num_weights), or None."""
    if padding_idx is None:
        return None
    if isinstance(padding_idx, bool) or not isinstance(padding_idx, numbers.Integral) \
            or not -num_weights <= padding_idx < num_weights:
        raise ArgumentError(f"{op}: padding_idx must be None or an int in [{-num_weights}, {num_weights}), "
                            f"got {padding_idx!r}")
    return int(padding_idx) % num_weights


def random_indices(shape: Sequence[int], num_weights: int, device: torch.device | str,
                   g: torch.Generator | None) -> torch.Tensor:
    return torch.randint(0, num_weights, tuple(shape), generator=g).to(device)


# (id, num_weights, dim, indices shape, layout, keywords): odd dims (1, 17, 1023, 4099), int32 indices,
# 2-D and 0-dim index tensors, indices repeated many times (the backward's sums), a padding row, views,
# empty index tensors.
CaseSpec = tuple[str, int, int, tuple[int, ...], str, dict]


def case_specs() -> list[CaseSpec]:
    return [
        ("1x1x1", 1, 1, (1,), "", {}),
        ("17x17x33", 17, 17, (33,), "", {}),
        ("100x1023x17", 100, 1023, (17,), "", {}),
        ("1023x64x4099", 1023, 64, (4099,), "", {}),
        ("50x4099x9", 50, 4099, (9,), "", {}),
        ("7x33x4099-repeats", 7, 33, (4099,), "", {}),
        ("int32", 100, 64, (257,), "int32", {}),
        ("2d-indices", 100, 40, (8, 33), "", {}),
        ("0d-index", 100, 40, (), "", {}),
        ("padding", 60, 40, (257,), "", {"padding_idx": 3}),
        ("padding-negative", 60, 40, (257,), "", {"padding_idx": -1}),
        ("sliced-weight", 64, 33, (100,), "sliced", {}),
        ("transposed-weight", 64, 33, (100,), "transposed", {}),
        ("strided-indices", 64, 33, (100,), "strided", {}),
        ("empty", 64, 33, (0,), "", {}),
        ("empty-2d", 64, 33, (0, 5), "", {}),
        ("big-4099x1024x300", 4099, 1024, (300,), "", {}),
    ]


def case_indices(spec: CaseSpec, device: torch.device, g: torch.Generator) -> torch.Tensor:
    _, num_weights, _, shape, layout, kwargs = spec
    if layout == "strided":
        idx = random_indices((2 * shape[0],), num_weights, device, g)[::2]
    else:
        idx = random_indices(shape, num_weights, device, g)
    if "padding_idx" in kwargs and idx.numel():
        idx.view(-1)[::5] = kwargs["padding_idx"] % num_weights  # the padding row is looked up too
    return idx.int() if layout == "int32" else idx


def case_weight(spec: CaseSpec, device: torch.device, dtype: torch.dtype, g: torch.Generator) -> torch.Tensor:
    _, num_weights, dim, _, layout, _ = spec
    if layout == "sliced":  # every other column: rows 2·dim apart, columns 2 apart
        return randn((num_weights, 2 * dim), device, dtype, g)[:, ::2]
    if layout == "transposed":
        return randn((dim, num_weights), device, dtype, g).t()
    return randn((num_weights, dim), device, dtype, g)


def embedding_cases(make: Callable[[CaseSpec], Callable]) -> list[Case]:
    return [Case(spec[0], make(spec), small=spec[2] * math.prod(spec[3]) <= INTERPRETER_MAX_ELEMENTS
                 and spec[1] * spec[2] <= INTERPRETER_MAX_ELEMENTS) for spec in case_specs()]


def embedding_bad_cases(op: str, args: Callable[..., tuple[tuple, dict]]) -> list[BadCase]:
    """Arguments both ops must reject; ``args(indices, weight, **kw)`` gives the op's (args, kwargs)."""
    w, i = torch.zeros(10, 4), torch.tensor([0, 3, 9])
    return [
        BadCase("float-indices", lambda: args(i.float(), w), DTypeError, "indices must be int64 or int32, got "
                "torch.float32"),
        BadCase("index-out-of-range", lambda: args(torch.tensor([0, 10]), w), ArgumentError,
                "indices hold 10, outside [0, 10)"),
        BadCase("negative-index", lambda: args(torch.tensor([-1, 2]), w), ArgumentError, "indices hold -1"),
        BadCase("padding-out-of-range", lambda: args(i, w, padding_idx=10), ArgumentError,
                "padding_idx must be None or an int in [-10, 10), got 10"),
        BadCase("indices-device", lambda: args(i.to("meta"), w), DeviceError, "indices are on meta"),
        BadCase("indices-not-tensor", lambda: args([0, 1], w), ArgumentError, "indices must be a torch.Tensor"),
    ]
