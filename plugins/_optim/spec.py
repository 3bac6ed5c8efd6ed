"""The optimizer-update family's spec side, shared by sgd_update_, adam_update_ and adam_update_foreach_:
checks of the state tensors and hyperparameters, the wrapper that runs an update on contiguous copies and writes
them back, Adam's per-step scalars, and the conformance cases' tensors and hyperparameters."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import torch

from kernelzoo.errors import ArgumentError
from kernelzoo.registry import Call, Case, check_same, check_tensor, randn


def check_state(op: str, param: Any, **state: Any) -> None:
    """Raise unless param is a float tensor and every state tensor (None skipped) matches it."""
    check_tensor(op, "param", param)
    for name, t in state.items():
        if t is None:
            continue
        check_tensor(op, name, t)
        check_same(op, param=param, **{name: t})
        if t.shape != param.shape:
            raise ArgumentError(f"{op}: {name} of shape {tuple(t.shape)} must have param's shape {tuple(param.shape)}")


def check_number(op: str, name: str, value: Any, low: float = 0.0, high: float = math.inf,
                 high_open: bool = False) -> float:
    """``value`` as a float in [low, high] (or [low, high)); ArgumentError naming it otherwise."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) \
            or not low <= value <= high or (high_open and value == high):
        interval = f"[{low:g}, {high:g}{')' if high_open else ']'}"
        raise ArgumentError(f"{op}: {name} must be a finite number in {interval}, got {value!r}")
    return float(value)


def placeholder(param: torch.Tensor) -> torch.Tensor:
    """A 0-element tensor standing for an absent state tensor (like param in dtype and device)."""
    return torch.empty(0, dtype=param.dtype, device=param.device)


def dense_run(call: Call, names: Sequence[str], run: Callable[[dict[str, torch.Tensor]], None]) -> tuple:
    """Run ``run`` on contiguous versions of the call's tensors, write the in-place ones back where a copy
    had to be made, and return the op's ``inplace`` tensors (the caller's, updated)."""
    tensors = {name: call.inputs[name].contiguous() for name in names}
    if call.inputs["param"].numel():
        run(tensors)
    for name in call.op.inplace:
        if name in tensors and tensors[name].data_ptr() != call.inputs[name].data_ptr():
            call.inputs[name].copy_(tensors[name])
    return tuple(call.inputs[name] for name in call.op.inplace)


def update_cases(variants: Sequence[tuple[str, dict]], make: Callable) -> list[Case]:
    """Each variant on odd sizes, 2-D and empty tensors, non-contiguous ones, and NaN/inf gradients; the
    first two also on 100003 elements (past the openmp plugins' thresholds for a second thread: 32768 elements
    for sgd_update_, 8192 for adam_update_)."""
    layouts = [("1", (1,), ""), ("17", (17,), ""), ("1023", (1023,), ""), ("4099", (4099,), ""),
               ("1023x17", (1023, 17), ""), ("0", (0,), ""), ("transposed", (17, 1023), "transposed"),
               ("sliced", (64, 33), "sliced"), ("nan-inf", (1023,), "nan")]
    cases = [Case(f"{label}-{name}", make(shape, layout, kwargs), small=math.prod(shape) <= 20_000)
             for name, kwargs in variants for label, shape, layout in layouts]
    return cases + [Case(f"100003-{name}", make((100_003,), "", kwargs), small=False) for name, kwargs in variants[:2]]


def state_tensor(shape: Sequence[int], layout: str, device: torch.device, dtype: torch.dtype,
                 g: torch.Generator, scale: float = 1.0, positive: bool = False) -> torch.Tensor:
    """A random tensor of ``shape`` in a layout: '' contiguous, 'transposed' (a .t() view of the transposed
    shape), 'sliced' (every other column of a wider tensor)."""
    full = (shape[0], 2 * shape[1]) if layout == "sliced" else tuple(reversed(shape)) if layout == "transposed" \
        else tuple(shape)
    x = randn(full, "cpu", torch.float32, g, scale)
    if positive:
        x = x.square()
    x = x.to(device, dtype)
    return x[:, ::2] if layout == "sliced" else x.t() if layout == "transposed" else x


def nan_grad(grad: torch.Tensor) -> torch.Tensor:
    """grad with a NaN, an inf and a -inf: they reach param (and the buffers) as in torch."""
    flat = grad.view(-1)
    flat[3], flat[100], flat[500] = float("nan"), float("inf"), float("-inf")
    return grad


STATE = ("param", "grad", "exp_avg", "exp_avg_sq", "max_exp_avg_sq")

_BASE = {"step": 3, "lr": 0.01, "beta1": 0.9, "beta2": 0.999, "eps": 1e-8, "weight_decay": 0.0}
# the conformance cases' hyperparameters, by name
VARIANTS = [("adam", _BASE), ("adamw", {**_BASE, "weight_decay": 0.1}),
            ("adam-l2", {**_BASE, "weight_decay": 0.1, "decoupled": False}),
            ("amsgrad", {**_BASE, "amsgrad": True, "weight_decay": 0.01}),
            # 1 - beta1 >= 0.5 takes lerp's other formula; step 1 the largest bias correction
            ("beta1-0.3-step1", {**_BASE, "beta1": 0.3, "beta2": 0.9, "step": 1, "eps": 1e-3})]


def scalars(call: Call) -> dict[str, float]:
    """The per-step scalars, in double as torch computes them in Python: step_size = lr / (1 − beta1^step),
    bc2_sqrt = sqrt(1 − beta2^step), decay = 1 − lr·weight_decay (AdamW's factor)."""
    c = call.params
    return {"step_size": c["lr"] / (1 - c["beta1"] ** c["step"]), "bc2_sqrt": (1 - c["beta2"] ** c["step"]) ** 0.5,
            "decay": 1 - c["lr"] * c["weight_decay"]}


def adam_case(shape: tuple[int, ...], layout: str, kwargs: dict) -> Callable:
    def build(device: torch.device, dtype: torch.dtype, g: torch.Generator) -> tuple[tuple, dict]:
        param = state_tensor(shape, layout, device, dtype, g)
        grad = state_tensor(shape, "transposed" if layout == "sliced" else layout, device, dtype, g, 0.5)
        if layout == "nan":
            grad = nan_grad(grad)
        exp_avg = state_tensor(shape, layout, device, dtype, g, 0.1)
        # v >= m², as in a real run (Jensen: the mean square is at least the squared mean); independent
        # random m and v would give |m|/sqrt(v) without bound, updates of any size, and float32 errors
        # past the table's atol in the largest ones (measured: 2e-5 at 100k elements)
        exp_avg_sq = state_tensor(shape, layout, device, dtype, g, 0.1, positive=True).add_(exp_avg.square())
        kw = dict(kwargs)
        if kw.get("amsgrad"):
            kw["max_exp_avg_sq"] = state_tensor(shape, layout, device, dtype, g, 0.1, positive=True)
        return (param, grad, exp_avg, exp_avg_sq), kw
    return build
