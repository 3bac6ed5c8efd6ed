"""Optimizers whose parameter updates are kernelzoo's fused in-place ops (sgd_update_, adam_update_ and,
for all of Adam's parameters at once, adam_update_foreach_), with torch.optim's SGD, Adam and AdamW
semantics."""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

import torch

from kernelzoo import ops
from mytorch.nn.module import Parameter


class Optimizer:
    def __init__(self, params: Iterable[Parameter], defaults: dict[str, Any]) -> None:
        self.params = [p for p in params]
        if not self.params:
            raise ValueError(f"{type(self).__name__}: got an empty parameter list")
        self.defaults = defaults
        self.state: dict[int, dict[str, Any]] = {}

    def zero_grad(self) -> None:
        for p in self.params:
            p.grad = None

    def step(self) -> None:
        for p in self.params:
            if p.grad is not None:
                self._update(p, self.state.setdefault(id(p), {}))

    def _update(self, p: Parameter, state: dict[str, Any]) -> None:
        raise NotImplementedError


class SGD(Optimizer):
    """torch.optim.SGD: momentum, dampening, Nesterov, weight decay (L2 added to the gradient)."""

    def __init__(self, params: Iterable[Parameter], lr: float = 1e-3, momentum: float = 0.0, dampening: float = 0.0,
                 weight_decay: float = 0.0, nesterov: bool = False) -> None:
        if lr < 0 or momentum < 0 or weight_decay < 0:
            raise ValueError(f"SGD: lr, momentum and weight_decay must be >= 0, got {lr}, {momentum}, {weight_decay}")
        if nesterov and (momentum <= 0 or dampening != 0):
            raise ValueError("SGD: Nesterov momentum needs momentum > 0 and dampening 0")
        super().__init__(params, {"lr": lr, "momentum": momentum, "dampening": dampening,
                                  "weight_decay": weight_decay, "nesterov": nesterov})

    def _update(self, p: Parameter, state: dict[str, Any]) -> None:
        d = self.defaults
        buffer, dampening = None, d["dampening"]
        if d["momentum"] != 0:
            buffer = state.get("momentum_buffer")
            if buffer is None:
                # torch's first step sets the buffer to the gradient: the op on zeros, undamped
                buffer = state["momentum_buffer"] = torch.zeros_like(p.data)
                dampening = 0.0
        ops.sgd_update_(p.data, p.grad.data, buffer, d["lr"], d["momentum"], dampening, d["weight_decay"],
                        d["nesterov"])


class Adam(Optimizer):
    """torch.optim.Adam (L2 weight decay added to the gradient) and, with decoupled=True, AdamW.

    With ``foreach`` (the default) a step updates the parameters that share a device, dtype and step
    count in one adam_update_foreach_ call, as torch's foreach and fused Adam do; otherwise with one
    adam_update_ call per parameter. The results are the same.

    ``capturable``: the step count lives on the parameter's device and the bias corrections are computed
    there, by kernelzoo's elementwise ops, so that a step can be captured in a CUDA graph and replayed
    (:func:`mytorch.cuda.graphed_step`): the fused kernels take the step as a host number, which a graph would
    replay unchanged. More launches per step, the same results within float32 rounding; no amsgrad.
    """

    decoupled = False

    def __init__(self, params: Iterable[Parameter], lr: float = 1e-3, betas: tuple[float, float] = (0.9, 0.999),
                 eps: float = 1e-8, weight_decay: float = 0.0, amsgrad: bool = False, foreach: bool = True,
                 capturable: bool = False) -> None:
        if lr < 0 or eps < 0 or weight_decay < 0 or not all(0 <= b < 1 for b in betas):
            raise ValueError(f"{type(self).__name__}: invalid lr={lr}, betas={betas}, eps={eps} or "
                             f"weight_decay={weight_decay}")
        if capturable and amsgrad:
            raise ValueError(f"{type(self).__name__}: capturable=True does not support amsgrad")
        super().__init__(params, {"lr": lr, "betas": tuple(betas), "eps": eps, "weight_decay": weight_decay,
                                  "amsgrad": amsgrad})
        self.foreach, self.capturable = foreach, capturable

    def _state(self, p: Parameter) -> dict[str, Any]:
        """p's state, created with the step count at 0 before its first step."""
        state = self.state.setdefault(id(p), {})
        if not state:
            state.update(step=0, exp_avg=torch.zeros_like(p.data), exp_avg_sq=torch.zeros_like(p.data),
                         max_exp_avg_sq=torch.zeros_like(p.data) if self.defaults["amsgrad"] else None)
        return state

    def step(self) -> None:
        if self.capturable:
            for p in self.params:
                if p.grad is not None:
                    self._capturable_update(p)
            return
        if not self.foreach:
            super().step()
            return
        # one pass: each parameter's tensors go straight into the lists of its (device, dtype, step) group
        groups: dict[tuple, tuple[list[torch.Tensor], ...]] = {}
        state_of, amsgrad = self.state, self.defaults["amsgrad"]
        for p in self.params:
            grad = p.grad
            if grad is None:
                continue
            state = state_of.get(id(p)) or self._state(p)
            step = state["step"] = state["step"] + 1
            data = p.data
            key = (data.device, data.dtype, step)
            lists = groups.get(key)
            if lists is None:
                lists = groups[key] = ([], [], [], [], [])
            lists[0].append(data)
            lists[1].append(grad.data)
            lists[2].append(state["exp_avg"])
            lists[3].append(state["exp_avg_sq"])
            if amsgrad:
                lists[4].append(state["max_exp_avg_sq"])
        d = self.defaults
        beta1, beta2 = d["betas"]
        for (_, _, step), (params, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs) in groups.items():
            ops.adam_update_foreach_(params, grads, exp_avgs, exp_avg_sqs, step, d["lr"], beta1, beta2, d["eps"],
                                     d["weight_decay"], amsgrad=amsgrad, decoupled=self.decoupled,
                                     max_exp_avg_sqs=max_exp_avg_sqs if amsgrad else None)

    def _update(self, p: Parameter, state: dict[str, Any]) -> None:
        d = self.defaults
        state = self._state(p)
        state["step"] += 1
        beta1, beta2 = d["betas"]
        ops.adam_update_(p.data, p.grad.data, state["exp_avg"], state["exp_avg_sq"], state["step"], d["lr"], beta1,
                         beta2, d["eps"], d["weight_decay"], amsgrad=d["amsgrad"], decoupled=self.decoupled,
                         max_exp_avg_sq=state["max_exp_avg_sq"])

    def _capturable_update(self, p: Parameter) -> None:
        """One step of ``p`` whose every number stays on its device: no host value changes from step to step."""
        d, data, grad = self.defaults, p.data, p.grad.data
        beta1, beta2 = d["betas"]
        state = self.state.setdefault(id(p), {})
        if not state:
            def const(value: float) -> torch.Tensor:
                return torch.full((), value, dtype=data.dtype, device=data.device)

            # step 0 and zero moments: a state zeroed in place is a fresh one (what graphed_step relies on)
            state.update(step=torch.zeros((), dtype=data.dtype, device=data.device),
                         exp_avg=torch.zeros_like(data), exp_avg_sq=torch.zeros_like(data),
                         constants={"one": const(1.0), "log_beta1": const(math.log(beta1) if beta1 else -math.inf),
                                    "log_beta2": const(math.log(beta2) if beta2 else -math.inf),
                                    "beta1": const(beta1), "beta2": const(beta2), "eps": const(d["eps"]),
                                    "lr": const(d["lr"]), "decay": const(1 - d["lr"] * d["weight_decay"])})
        c, step, exp_avg, exp_avg_sq = state["constants"], state["step"], state["exp_avg"], state["exp_avg_sq"]
        ops.copy_(step, ops.add(step, c["one"]))
        # 1 - beta^step, as exp(step · log beta): the step is a device number
        bias1 = ops.add(c["one"], ops.exp(ops.mul(step, c["log_beta1"])), alpha=-1)
        bias2 = ops.add(c["one"], ops.exp(ops.mul(step, c["log_beta2"])), alpha=-1)
        if d["weight_decay"]:
            if self.decoupled:
                ops.copy_(data, ops.mul(data, c["decay"]))
            else:
                grad = ops.add(grad, data, alpha=d["weight_decay"])
        ops.copy_(exp_avg, ops.add(ops.mul(exp_avg, c["beta1"]), grad, alpha=1 - beta1))
        ops.copy_(exp_avg_sq, ops.add(ops.mul(exp_avg_sq, c["beta2"]), ops.mul(grad, grad), alpha=1 - beta2))
        denom = ops.add(ops.div(ops.pow(exp_avg_sq, 0.5), ops.pow(bias2, 0.5)), c["eps"])
        update = ops.div(ops.mul(exp_avg, c["lr"]), ops.mul(denom, bias1))
        ops.copy_(data, ops.add(data, update, alpha=-1))


class AdamW(Adam):
    """torch.optim.AdamW: Adam with weight decay applied to the parameter (decoupled), 0.01 by default."""

    decoupled = True

    def __init__(self, params: Iterable[Parameter], lr: float = 1e-3, betas: tuple[float, float] = (0.9, 0.999),
                 eps: float = 1e-8, weight_decay: float = 0.01, amsgrad: bool = False, foreach: bool = True,
                 capturable: bool = False) -> None:
        super().__init__(params, lr, betas, eps, weight_decay, amsgrad, foreach, capturable)
