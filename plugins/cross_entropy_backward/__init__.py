"""cross_entropy_backward(grad_loss, logits, target, lse, reduction="mean", ignore_index=-100,
label_smoothing=0.0) -> grad_logits: the gradient of the op cross_entropy (see its spec) for the loss
gradient grad_loss, in one pass over the logits from the forward's lse (float32, one per row):

    grad_x_ic = (exp(x_ic − lse_i) − (1 − ε)·[c = t_i] − ε/C) · scale_i
    scale_i = grad_loss_i ("none"), grad_loss ("sum"), grad_loss / #(t ≠ ignore_index) ("mean")
    grad_x_ic = 0 where t_i = ignore_index (whatever the logits: no NaN from an ignored row)

grad_loss has the loss's shape (the target's for "none", 0-dim otherwise) and the logits' dtype;
grad_logits has the logits' shape and dtype. The count of "mean" is taken from the target here, so the
op stands alone. The op's shape is the forward's (rows, C).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch
from kernelzoo_plugins._rows.cross_entropy import (
    CaseSpec,
    CrossEntropyOp,
    as_rows,
    case_inputs,
    check_options,
    check_target,
    cross_entropy_bad_cases,
    cross_entropy_cases,
    log_sum_exp,
    targets_with,
    widened,
)

from kernelzoo.errors import ArgumentError, DeviceError, DTypeError
from kernelzoo.registry import BadCase, Call, Case, check_same, check_tensor, randn
from kernelzoo.tolerance import Tolerance


def row_scales(grad_loss: torch.Tensor, target: torch.Tensor, reduction: str, ignore_index: int,
               dtype: torch.dtype) -> torch.Tensor:
    """scale_i per row (rows,) in ``dtype``: 0 for ignored rows."""
    t = target.reshape(-1)
    valid = t != ignore_index
    g = grad_loss.to(dtype)
    if reduction == "none":
        scale = g.reshape(-1)
    elif reduction == "sum":
        scale = g.expand(t.shape)
    else:
        scale = (g / valid.sum().clamp(min=1)).expand(t.shape)  # no valid row: every scale is masked below
    return torch.where(valid, scale, 0.0)


def grad_rows(x2d: torch.Tensor, target: torch.Tensor, lse: torch.Tensor, scale: torch.Tensor, smoothing: float,
              dtype: torch.dtype) -> torch.Tensor:
    """The formula on (rows, C) logits in ``dtype``."""
    x = x2d.to(dtype)
    t = target.reshape(-1)
    p = torch.exp(x - lse.reshape(-1, 1).to(dtype))
    onehot = torch.zeros_like(p).scatter_(1, torch.where(t < 0, 0, t).clamp(max=x.shape[1] - 1)[:, None], 1.0)
    grad = (p - (1 - smoothing) * onehot - smoothing / x.shape[1]) * scale[:, None]
    return torch.where(scale[:, None] == 0, 0.0, grad)  # ignored rows (and zero gradients) give exact zeros


class CrossEntropyBackward(CrossEntropyOp):
    """cross_entropy_backward(grad_loss, logits, target, lse, reduction="mean", ignore_index=-100,
    label_smoothing=0.0) -> grad_logits."""

    name = "cross_entropy_backward"
    # its torch plugin does more than torch's own op (a second pass for the log-sum-exp the backward needs): a
    # host-bound call runs the Triton kernel first
    host_bound_order = {"cuda": ("triton", "cuda")}
    checks_every_call = True  # the target's values must be class indices (value_range)
    # Untuned on a GPU, the cuda plugin first: tuned, it ran ahead of the Triton plugin at every benchmark shape
    # (docs/perf/cross_entropy_backward.md)
    default_order = {"cuda": ("cuda",)}
    shapes = {"cuda": [(8192, 50257), (4096, 128256), (16384, 32000)],
              "cpu": [(512, 50257), (256, 128256), (2048, 32000)]}

    def check(self, grad_loss: torch.Tensor, logits: torch.Tensor, target: torch.Tensor, lse: torch.Tensor,
              reduction: str = "mean", ignore_index: int = -100, label_smoothing: float = 0.0) -> Call:
        check_target(self.name, logits, target, ignore_index)
        params = check_options(self.name, reduction, label_smoothing)
        check_tensor(self.name, "grad_loss", grad_loss)
        check_same(self.name, logits=logits, grad_loss=grad_loss)
        expected = tuple(target.shape) if reduction == "none" else ()
        if tuple(grad_loss.shape) != expected:
            raise ArgumentError(f"{self.name}: grad_loss of shape {tuple(grad_loss.shape)} must have the loss's "
                                f"shape {expected} (reduction={reduction!r})")
        check_tensor(self.name, "lse", lse, (torch.float32,))
        if lse.device != logits.device:
            raise DeviceError(f"{self.name}: logits are on {logits.device} but lse is on {lse.device}; "
                              "expected one device")
        if lse.shape != target.shape:
            raise ArgumentError(f"{self.name}: lse of shape {tuple(lse.shape)} must have the target's shape "
                                f"{tuple(target.shape)}")
        return Call(self, {"logits": logits, "grad_loss": grad_loss, "target": target, "lse": lse},
                    {**params, "ignore_index": int(ignore_index)})

    def reference(self, call: Call) -> torch.Tensor:
        i, p = call.inputs, call.params
        scale = row_scales(i["grad_loss"], i["target"], p["reduction"], p["ignore_index"], torch.float64)
        grad = grad_rows(as_rows(i["logits"]), i["target"], i["lse"], scale, p["label_smoothing"], torch.float64)
        return from_rows_reference(grad, i["logits"])

    def example(self, shape: Sequence[int], dtype: torch.dtype, device: torch.device | str,
                generator: torch.Generator | None = None, ignored: float = 0.05, **params: Any) -> Call:
        """Logits (rows, C), targets (a share ``ignored`` of them ignore_index), their lse and a loss gradient."""
        rows, classes = shape
        target = targets_with((rows,), classes, ignored, params.get("ignore_index", -100), device, generator)
        logits = randn((rows, classes), device, dtype, generator)
        lse = log_sum_exp(logits.double()).float()
        grad_loss = randn((rows,) if params.get("reduction") == "none" else (), device, dtype, generator)
        return self.check(grad_loss, logits, target, lse, **params)

    def flops(self, call: Call) -> float:
        return 4.0 * call.inputs["logits"].numel()

    def bytes(self, call: Call) -> float:
        x, t = call.inputs["logits"], call.inputs["target"]
        return float(2 * x.numel() * x.element_size() + t.numel() * (8 + 4 + x.element_size()))

    def tolerance(self, call: Call) -> Tolerance:
        return widened(call, max(self.sizes(call).values()))

    def cases(self) -> list[Case]:
        return cross_entropy_cases(_backward_case)

    def bad_cases(self) -> list[BadCase]:
        def args(logits: Any, target: Any) -> tuple:
            lse = torch.zeros(target.shape) if isinstance(target, torch.Tensor) else torch.zeros(4)
            return (torch.ones(()), logits, target, lse)
        x, t = torch.zeros(4, 5), torch.tensor([0, 1, 2, 3])
        return [
            *[b for b in cross_entropy_bad_cases(self.name, args) if b.id != "int-logits"],
            BadCase("grad-shape", lambda: ((torch.ones(4), x, t, torch.zeros(4)), {}), ArgumentError,
                    "grad_loss of shape (4,) must have the loss's shape () (reduction='mean')"),
            BadCase("grad-dtype", lambda: ((torch.ones((), dtype=torch.float16), x, t, torch.zeros(4)), {}),
                    DTypeError, "logits is torch.float32 but grad_loss is torch.float16"),
            BadCase("lse-dtype", lambda: ((torch.ones(()), x, t, torch.zeros(4, dtype=torch.float64)), {}),
                    DTypeError, "lse must be float32, got torch.float64"),
            BadCase("lse-shape", lambda: ((torch.ones(()), x, t, torch.zeros(5)), {}), ArgumentError,
                    "lse of shape (5,) must have the target's shape (4,)"),
        ]


def from_rows_reference(g2d: torch.Tensor, logits: torch.Tensor) -> torch.Tensor:
    """(rows, C) back to the logits' shape, contiguous."""
    if logits.dim() <= 2:
        return g2d.reshape(logits.shape)
    return g2d.reshape(logits.movedim(1, -1).shape).movedim(-1, 1).contiguous()


def rows_of(call: Call) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(logits as (rows, C) with unit class stride, target as contiguous (rows,), lse as contiguous (rows,))."""
    i = call.inputs
    return as_rows(i["logits"]), i["target"].reshape(-1).contiguous(), i["lse"].reshape(-1).contiguous()


def _backward_case(spec: CaseSpec) -> Callable:
    def build(device: torch.device, dtype: torch.dtype, g: torch.Generator) -> tuple[tuple, dict]:
        logits, target, kwargs = case_inputs(spec, device, dtype, g)
        lse = log_sum_exp(as_rows(logits).double()).float().reshape(target.shape)
        shape = tuple(target.shape) if kwargs.get("reduction") == "none" else ()
        return (randn(shape, device, dtype, g), logits, target, lse), kwargs
    return build
