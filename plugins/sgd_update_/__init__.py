"""sgd_update_(param, grad, momentum_buffer, lr, momentum=0, dampening=0, weight_decay=0, nesterov=False):
one step of torch.optim.SGD on one tensor, in place, in one fused pass (torch's _single_tensor_sgd, in
its order of operations):

    g = grad + weight_decay·param                     (when weight_decay ≠ 0)
    buf = momentum·buf + (1 − dampening)·g            (when momentum ≠ 0)
    g = g + momentum·buf if nesterov else buf         (when momentum ≠ 0)
    param = param − lr·g

param and momentum_buffer are updated in place; grad is read only. momentum_buffer may be None when
momentum is 0 (a buffer given then is left as it is). torch's first step with momentum copies the
gradient into a new buffer (buf = g): that is this op on a zero buffer with dampening=0 (0·momentum +
1·g = g exactly). Tensors share param's shape, dtype and device; any strides (a non-contiguous param or
buffer is updated through a contiguous copy written back). Computed in float32; float16 / bfloat16
tensors are read and rounded once per step.

Implementations return (param, momentum_buffer) — the buffer a 0-element placeholder when none was given,
so that every name in ``inplace`` is an input; ``kernelzoo.ops.sgd_update_`` returns param. The update
runs outside autograd: the tensors are detached aliases of the ones passed (no_grad, as in torch.optim).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import torch
from kernelzoo_plugins._optim.spec import (
    check_number,
    check_state,
    nan_grad,
    placeholder,
    state_tensor,
    update_cases,
)

from kernelzoo.errors import ArgumentError, DTypeError
from kernelzoo.registry import BadCase, Call, Case, Op, randn


class SgdUpdate(Op):
    """sgd_update_(param, grad, momentum_buffer, lr, momentum=0, dampening=0, weight_decay=0, nesterov=False):
    one step of torch.optim.SGD, in place, returning param."""

    name = "sgd_update_"
    inplace = ("param", "momentum_buffer")
    # (elements,): a 64M-parameter tensor (768 MB of fp32 state moved), and smaller ones
    shapes = {"cuda": [(64 << 20,), (16 << 20,)], "cpu": [(4 << 20,), (1 << 20,)]}

    def check(self, param: torch.Tensor, grad: torch.Tensor, momentum_buffer: torch.Tensor | None, lr: float,
              momentum: float = 0.0, dampening: float = 0.0, weight_decay: float = 0.0,
              nesterov: bool = False) -> Call:
        check_state(self.name, param, grad=grad, momentum_buffer=momentum_buffer)
        params = {"lr": check_number(self.name, "lr", lr), "momentum": check_number(self.name, "momentum", momentum),
                  "dampening": check_number(self.name, "dampening", dampening, -math.inf),
                  "weight_decay": check_number(self.name, "weight_decay", weight_decay)}
        if not isinstance(nesterov, bool):
            raise ArgumentError(f"{self.name}: nesterov must be a bool, got {nesterov!r}")
        if nesterov and (params["momentum"] == 0 or params["dampening"] != 0):
            raise ArgumentError(f"{self.name}: nesterov needs momentum > 0 and dampening 0, got momentum="
                                f"{momentum!r}, dampening={dampening!r}")
        if params["momentum"] != 0 and momentum_buffer is None:
            raise ArgumentError(f"{self.name}: momentum_buffer is None but momentum is {momentum!r}; pass a buffer "
                                "(zeros and dampening=0 for torch's first step, which sets it to the gradient)")
        buffer = momentum_buffer.detach() if momentum_buffer is not None else placeholder(param)
        return Call(self, {"param": param.detach(), "grad": grad.detach(), "momentum_buffer": buffer},
                    {**params, "nesterov": nesterov})

    def reference(self, call: Call) -> tuple[torch.Tensor, torch.Tensor]:
        p, g, buf = (call.inputs[name].double() for name in ("param", "grad", "momentum_buffer"))
        lr, momentum, dampening, wd = (call.params[k] for k in ("lr", "momentum", "dampening", "weight_decay"))
        if wd != 0:
            g = g + wd * p
        if momentum != 0:
            buf = momentum * buf + (1 - dampening) * g
            g = g + momentum * buf if call.params["nesterov"] else buf
        return p - lr * g, buf

    def example(self, shape: Sequence[int], dtype: torch.dtype, device: torch.device | str,
                generator: torch.Generator | None = None, **params: Any) -> Call:
        """Random param, gradient and buffer of ``shape``; by default momentum 0.9 and weight decay 1e-4."""
        kwargs = {"lr": 0.01, "momentum": 0.9, "weight_decay": 1e-4, **params}
        param = randn(shape, device, dtype, generator)
        grad = randn(shape, device, dtype, generator, 0.01)
        buffer = randn(shape, device, dtype, generator, 0.01) if kwargs["momentum"] else None
        return self.check(param, grad, buffer, **kwargs)

    def sizes(self, call: Call) -> dict[str, int]:
        return {"n": call.inputs["param"].numel()}

    def flags(self, call: Call) -> str:
        on = [("momentum", call.params["momentum"] != 0), ("nesterov", call.params["nesterov"]),
              ("weight_decay", call.params["weight_decay"] != 0)]
        return "-".join(name for name, yes in on if yes)

    def flops(self, call: Call) -> float:
        return 6.0 * call.inputs["param"].numel()

    def bytes(self, call: Call) -> float:
        p = call.inputs["param"]
        arrays = 3 + (2 if call.params["momentum"] else 0)  # param read and written, grad read, buffer both
        return float(arrays * p.numel() * p.element_size())

    def result(self, call: Call, outputs: Any) -> torch.Tensor:
        return outputs[0]

    def cases(self) -> list[Case]:
        variants = [("plain", {"lr": 0.1}), ("momentum", {"lr": 0.1, "momentum": 0.9}),
                    ("dampening-wd", {"lr": 0.05, "momentum": 0.8, "dampening": 0.3, "weight_decay": 0.01}),
                    ("nesterov-wd", {"lr": 0.05, "momentum": 0.9, "nesterov": True, "weight_decay": 0.1}),
                    ("wd-no-momentum", {"lr": 0.1, "weight_decay": 0.05})]
        return [*update_cases(variants, _make),
                Case("first-step-zero-buffer", _first_step), Case("unused-buffer", _unused_buffer)]

    def bad_cases(self) -> list[BadCase]:
        p = torch.zeros(4, 3)
        return [
            BadCase("int-dtype", lambda: ((torch.arange(4), torch.arange(4), None, 0.1), {}), DTypeError,
                    "param must be float32, float16, bfloat16, got torch.int64"),
            BadCase("grad-shape", lambda: ((p, torch.zeros(3, 4), None, 0.1), {}), ArgumentError,
                    "grad of shape (3, 4) must have param's shape (4, 3)"),
            BadCase("grad-dtype", lambda: ((p, p.half(), None, 0.1), {}), DTypeError,
                    "param is torch.float32 but grad is torch.float16"),
            BadCase("buffer-missing", lambda: ((p, p, None, 0.1), {"momentum": 0.9}), ArgumentError,
                    "momentum_buffer is None but momentum is 0.9"),
            BadCase("nesterov-dampening", lambda: ((p, p, p.clone(), 0.1),
                                                   {"momentum": 0.9, "dampening": 0.1, "nesterov": True}),
                    ArgumentError, "nesterov needs momentum > 0 and dampening 0"),
            BadCase("negative-lr", lambda: ((p, p, None, -0.1), {}), ArgumentError,
                    "lr must be a finite number in [0, inf], got -0.1"),
            BadCase("lr-nan", lambda: ((p, p, None, float("nan")), {}), ArgumentError, "lr must be a finite number"),
        ]


def _make(shape: tuple[int, ...], layout: str, kwargs: dict) -> Callable:
    def build(device: torch.device, dtype: torch.dtype, g: torch.Generator) -> tuple[tuple, dict]:
        param = state_tensor(shape, layout, device, dtype, g)
        grad = state_tensor(shape, "transposed" if layout == "sliced" else layout, device, dtype, g, 0.5)
        if layout == "nan":
            grad = nan_grad(grad)
        buffer = state_tensor(shape, layout, device, dtype, g, 0.1) if kwargs.get("momentum") else None
        return (param, grad, buffer), dict(kwargs)
    return build


def _first_step(device: torch.device, dtype: torch.dtype, g: torch.Generator) -> tuple[tuple, dict]:
    param, grad = randn((4099,), device, dtype, g), randn((4099,), device, dtype, g)
    return (param, grad, torch.zeros_like(param), 0.1), {"momentum": 0.9}


def _unused_buffer(device: torch.device, dtype: torch.dtype, g: torch.Generator) -> tuple[tuple, dict]:
    param, grad, buf = (randn((1023,), device, dtype, g) for _ in range(3))
    return (param, grad, buf, 0.1), {"momentum": 0.0}
