"""adam_update_(param, grad, exp_avg, exp_avg_sq, step, lr, beta1, beta2, eps, weight_decay, amsgrad=False,
decoupled=True, max_exp_avg_sq=None): one step of torch.optim.AdamW (decoupled=True) or Adam
(decoupled=False) on one tensor, in place, in one fused pass, in the order of operations of torch's
_single_tensor_adam:

    param = param·(1 − lr·weight_decay)             (decoupled, weight_decay ≠ 0: AdamW)
    g = grad + weight_decay·param                   (not decoupled, weight_decay ≠ 0: Adam's L2 term)
    exp_avg = exp_avg.lerp(g, 1 − beta1)
    exp_avg_sq = beta2·exp_avg_sq + (1 − beta2)·g²
    max_exp_avg_sq = max(max_exp_avg_sq, exp_avg_sq)                          (amsgrad)
    denom = sqrt(exp_avg_sq or max_exp_avg_sq) / sqrt(1 − beta2^step) + eps
    param = param − lr / (1 − beta1^step) · exp_avg / denom

``step`` is the step's number, counting from 1 (torch's state["step"] after its increment). param,
exp_avg, exp_avg_sq and (amsgrad) max_exp_avg_sq are updated in place; grad is read only. Tensors share
param's shape, dtype and device; any strides (non-contiguous ones through contiguous copies written
back). Computed in float32; float16 / bfloat16 tensors are read and rounded once per step.

Implementations return (param, exp_avg, exp_avg_sq, max_exp_avg_sq) — the last a 0-element placeholder
without amsgrad, so that every name in ``inplace`` is an input; ``kernelzoo.ops.adam_update_`` returns
param. The update runs outside autograd (detached aliases of the tensors passed, as torch.optim's no_grad).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch
from kernelzoo_plugins._optim.spec import (
    STATE,
    VARIANTS,
    adam_case,
    check_number,
    check_state,
    placeholder,
    scalars,
    update_cases,
)

from kernelzoo.errors import ArgumentError, DTypeError
from kernelzoo.registry import BadCase, Call, Case, Op, randn


class AdamUpdate(Op):
    """adam_update_(param, grad, exp_avg, exp_avg_sq, step, lr, beta1, beta2, eps, weight_decay, amsgrad=False,
    decoupled=True, max_exp_avg_sq=None): one step of torch.optim.AdamW / Adam, in place, returning param."""

    name = "adam_update_"
    inplace = ("param", "exp_avg", "exp_avg_sq", "max_exp_avg_sq")
    # (elements,): a 64M-parameter tensor (1.8 GB of fp32 state moved), and smaller ones
    shapes = {"cuda": [(64 << 20,), (16 << 20,)], "cpu": [(4 << 20,), (1 << 20,)]}

    def check(self, param: torch.Tensor, grad: torch.Tensor, exp_avg: torch.Tensor, exp_avg_sq: torch.Tensor,
              step: int, lr: float, beta1: float, beta2: float, eps: float, weight_decay: float,
              amsgrad: bool = False, decoupled: bool = True, max_exp_avg_sq: torch.Tensor | None = None) -> Call:
        check_state(self.name, param, grad=grad, exp_avg=exp_avg, exp_avg_sq=exp_avg_sq, max_exp_avg_sq=max_exp_avg_sq)
        if isinstance(step, bool) or not isinstance(step, int) or step < 1:
            raise ArgumentError(f"{self.name}: step must be an int >= 1 (the step's number, counting from 1), "
                                f"got {step!r}")
        for name, flag in (("amsgrad", amsgrad), ("decoupled", decoupled)):
            if not isinstance(flag, bool):
                raise ArgumentError(f"{self.name}: {name} must be a bool, got {flag!r}")
        if amsgrad and max_exp_avg_sq is None:
            raise ArgumentError(f"{self.name}: amsgrad needs max_exp_avg_sq (zeros at the first step), got None")
        params = {"step": step, "lr": check_number(self.name, "lr", lr),
                  "beta1": check_number(self.name, "beta1", beta1, 0.0, 1.0, high_open=True),
                  "beta2": check_number(self.name, "beta2", beta2, 0.0, 1.0, high_open=True),
                  "eps": check_number(self.name, "eps", eps),
                  "weight_decay": check_number(self.name, "weight_decay", weight_decay),
                  "amsgrad": amsgrad, "decoupled": decoupled}
        inputs = {"param": param, "grad": grad, "exp_avg": exp_avg, "exp_avg_sq": exp_avg_sq,
                  "max_exp_avg_sq": max_exp_avg_sq if amsgrad else placeholder(param)}
        return Call(self, {name: t.detach() for name, t in inputs.items()}, params)

    def reference(self, call: Call) -> tuple[torch.Tensor, ...]:
        p, g, m, v, v_max = (call.inputs[name].double() for name in STATE)
        c, s = call.params, scalars(call)
        if c["weight_decay"] != 0:
            if c["decoupled"]:
                p = p * s["decay"]
            else:
                g = g + c["weight_decay"] * p
        m = torch.lerp(m, g, 1 - c["beta1"])
        v = c["beta2"] * v + (1 - c["beta2"]) * g * g
        if c["amsgrad"]:
            v_max = torch.maximum(v_max, v)
        denom = (v_max if c["amsgrad"] else v).sqrt() / s["bc2_sqrt"] + c["eps"]
        return p - s["step_size"] * m / denom, m, v, v_max

    def example(self, shape: Sequence[int], dtype: torch.dtype, device: torch.device | str,
                generator: torch.Generator | None = None, **params: Any) -> Call:
        """Random state of ``shape`` at step 10; AdamW with lr 1e-3, betas (0.9, 0.999), weight decay 0.01."""
        kwargs = {"step": 10, "lr": 1e-3, "beta1": 0.9, "beta2": 0.999, "eps": 1e-8, "weight_decay": 0.01, **params}
        param = randn(shape, device, dtype, generator)
        grad, exp_avg = randn(shape, device, dtype, generator, 0.01), randn(shape, device, dtype, generator, 0.01)
        # v >= m², see adam_case
        exp_avg_sq = randn(shape, device, dtype, generator, 0.01).square().add_(exp_avg.square())
        if kwargs.get("amsgrad"):
            kwargs["max_exp_avg_sq"] = exp_avg_sq * 1.5
        return self.check(param, grad, exp_avg, exp_avg_sq, **kwargs)

    def sizes(self, call: Call) -> dict[str, int]:
        return {"n": call.inputs["param"].numel()}

    def flags(self, call: Call) -> str:
        c = call.params
        decay = ("adamw" if c["decoupled"] else "l2") if c["weight_decay"] else ""
        return "-".join(filter(None, [decay, "amsgrad" if c["amsgrad"] else ""]))

    def flops(self, call: Call) -> float:
        return 16.0 * call.inputs["param"].numel()

    def bytes(self, call: Call) -> float:
        p = call.inputs["param"]
        arrays = 7 + (2 if call.params["amsgrad"] else 0)  # p, m, v read and written, grad read; max both
        return float(arrays * p.numel() * p.element_size())

    def result(self, call: Call, outputs: Any) -> torch.Tensor:
        return outputs[0]

    def cases(self) -> list[Case]:
        return update_cases(VARIANTS, adam_case)

    def bad_cases(self) -> list[BadCase]:
        p = torch.zeros(4, 3)
        hyper = {"lr": 1e-3, "beta1": 0.9, "beta2": 0.999, "eps": 1e-8, "weight_decay": 0.0}

        def call(*tensors: Any, **kw: Any) -> Callable[[], tuple[tuple, dict]]:
            return lambda: ((*tensors, kw.pop("step", 1)), {**hyper, **kw})
        return [
            BadCase("int-dtype", call(*(torch.arange(4),) * 4), DTypeError,
                    "param must be float32, float16, bfloat16, got torch.int64"),
            BadCase("exp-avg-shape", call(p, p, torch.zeros(12), p), ArgumentError,
                    "exp_avg of shape (12,) must have param's shape (4, 3)"),
            BadCase("exp-avg-sq-dtype", call(p, p, p, p.bfloat16()), DTypeError,
                    "param is torch.float32 but exp_avg_sq is torch.bfloat16"),
            BadCase("step-0", call(p, p, p, p, step=0), ArgumentError, "step must be an int >= 1"),
            BadCase("beta1-1", call(p, p, p, p, beta1=1.0), ArgumentError,
                    "beta1 must be a finite number in [0, 1), got 1.0"),
            BadCase("amsgrad-without-max", call(p, p, p, p, amsgrad=True), ArgumentError,
                    "amsgrad needs max_exp_avg_sq"),
            BadCase("negative-eps", call(p, p, p, p, eps=-1.0), ArgumentError, "eps must be a finite number"),
        ]
