"""The one bridge from an op's declared :class:`~kernelzoo.registry.Derivative` to torch autograd.

Two registrations read the same declaration:

- :func:`apply`: the eager path of ``kernelzoo.ops.<op>``, one generic ``torch.autograd.Function``;
- :func:`register`: the autograd formula of the custom op ``torch.ops.kernelzoo.<op>`` (torch.compile, and
  callers of ``torch.ops`` directly), through ``torch.library.register_autograd``.

mytorch's Functions for these ops read the declaration too (``mytorch.functions``), with the helpers
:func:`keep` and :func:`kept`. The plugin forced for the forward (``kernelzoo.use``) is carried into the
backward: autograd runs backwards on its own threads, which a context variable does not reach.
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping, Sequence
from typing import Any

import torch

from kernelzoo import dispatch
from kernelzoo.registry import Call, Derivative, Op


def keep(ctx: Any, saved: Mapping[str, Any]) -> None:
    """Store what a derivative's ``save`` returned on an autograd ``ctx`` (torch's or mytorch's): tensors through
    ``save_for_backward`` (torch then catches their modification before the backward), the rest as they are."""
    names, tensors, values = [], [], {}
    for name, value in saved.items():
        if isinstance(value, torch.Tensor):
            names.append(name)
            tensors.append(value)
        else:
            values[name] = value
    ctx.save_for_backward(*tensors)
    ctx.kept_names, ctx.kept_values = names, values


def kept(ctx: Any) -> dict[str, Any]:
    """What :func:`keep` stored, by name again."""
    return {**ctx.kept_values, **dict(zip(ctx.kept_names, ctx.saved_tensors))}


def as_tuple(outputs: Any) -> tuple[torch.Tensor, ...]:
    return tuple(outputs) if isinstance(outputs, (tuple, list)) else (outputs,)


def forced(plugin: str | None) -> contextlib.AbstractContextManager[Any]:
    """``kernelzoo.use(plugin)``, or nothing when no plugin was forced."""
    return dispatch.use(plugin) if plugin else contextlib.nullcontext()


def contiguous(t: torch.Tensor) -> torch.Tensor:
    """``t`` itself if contiguous, else a contiguous copy made by the copy_ op (the backward ops of max and
    embedding read gradients row by row)."""
    if t.is_contiguous():
        return t
    from kernelzoo import ops

    return ops.copy_(torch.empty(t.shape, dtype=t.dtype, device=t.device), t)


def scaled(t: torch.Tensor, factor: float) -> torch.Tensor:
    """``t`` times ``factor`` by the mul op (``t`` itself for 1), the factor a 0-d tensor of ``t``'s dtype."""
    if factor == 1.0:
        return t
    from kernelzoo import ops

    return ops.mul(t, torch.full((), factor, dtype=t.dtype, device=t.device))


def reduced(grad: torch.Tensor, shape: Sequence[int]) -> torch.Tensor:
    """``grad`` summed by the sum op over the dims that broadcasting expanded an input of ``shape`` over, back
    to ``shape`` (``grad`` itself where nothing was expanded)."""
    shape = tuple(shape)
    if tuple(grad.shape) == shape:
        return grad
    from kernelzoo import ops

    lead = grad.dim() - len(shape)
    dims = [*range(lead), *(lead + i for i, n in enumerate(shape) if n == 1 and grad.shape[lead + i] != 1)]
    return ops.sum(grad, dim=dims, keepdim=True).reshape(shape)


class _Function(torch.autograd.Function):
    """Any op with a derivative: the forward runs the call (all outputs, output 0 differentiable), the backward
    the declaration's backward.

    What :func:`keep` and :func:`kept` do is written out here: this Function is on the path of every eager call
    that records a backward, where each Python call and temporary dict adds to the op's host time."""

    @staticmethod
    def forward(ctx: Any, call: Call, choice: dispatch.Choice | None, *tensors: torch.Tensor | None) -> Any:
        op = call.op
        derivative: Derivative = op.derivative  # type: ignore[assignment]
        names = derivative.inputs
        if len(names) == 1:
            t = tensors[0]
            inputs = call.inputs if t is None else {**call.inputs, names[0]: t.detach()}
        else:
            inputs = dict(call.inputs)
            for name, t in zip(names, tensors):
                if t is not None:
                    inputs[name] = t.detach()
        call = Call(op, inputs, call.params)
        if derivative.recording is not None:
            recorded = derivative.recording(call)
            if recorded is not call:  # another key: dispatch chooses for it
                call, choice = recorded, None
        outputs = dispatch.run_call(op, call) if choice is None else dispatch.run_chosen(op, call, choice)
        several = isinstance(outputs, tuple)
        saved = derivative.save(call, outputs if several else (outputs,))
        kept_names, kept_tensors = [], []
        for name, value in saved.items():
            if isinstance(value, torch.Tensor):
                kept_names.append(name)
                kept_tensors.append(value)
        if kept_names:  # the tensors go through save_for_backward alone (no reference cycle through ctx)
            for name in kept_names:
                del saved[name]
            ctx.save_for_backward(*kept_tensors)
        if several:
            ctx.mark_non_differentiable(*outputs[1:])
        ctx.kept_names, ctx.kept_values, ctx.derivative, ctx.plugin = \
            kept_names, saved, derivative, dispatch.forced_plugin()
        return outputs

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor, *rest: Any) -> tuple:
        # Autograd runs a backward with gradients off unless asked to build a graph of it (create_graph), when
        # once_differentiable's wrapper makes a second derivative an error. Only then is that wrapper run: its
        # no_grad context costs more host time than the rest of this method.
        if torch.is_grad_enabled():
            return _once_differentiable_backward(ctx, grad, *rest)
        return _backward(ctx, grad)


def _backward(ctx: Any, grad: torch.Tensor, *_: Any) -> tuple:
    derivative: Derivative = ctx.derivative
    saved = dict(ctx.kept_values)
    if ctx.kept_names:
        saved.update(zip(ctx.kept_names, ctx.saved_tensors))
    if ctx.plugin:
        with dispatch.use(ctx.plugin):
            grads = derivative.backward(saved, grad)
    else:
        grads = derivative.backward(saved, grad)
    need = ctx.needs_input_grad
    names = derivative.inputs
    if len(names) == 1:
        return None, None, grads.get(names[0]) if need[2] else None
    return (None, None, *[grads.get(name) if need[i] else None for i, name in enumerate(names, 2)])


_once_differentiable_backward = torch.autograd.function.once_differentiable(_backward)


# torch's C++ apply, without the Python of Function.apply around it (a fifth of this path's own host time): that
# wrapper binds default arguments for Functions with a setup_context (this one has none), unwraps tensors left
# over from finished functorch transforms (done here too, by the same C++ function) and, inside a functorch
# transform, takes another route (taken here too)
_c_apply = super(torch.autograd.Function, _Function).apply
_transforms_active = torch._C._are_functorch_transforms_active
_unwrap_if_dead = torch._C._functorch.unwrap_if_dead


def apply(call: Call, choice: dispatch.Choice | None = None) -> Any:
    """Run a checked ``call`` recording its backward: all of the implementation's outputs. ``choice``: what
    runs it, where the caller has chosen already (else dispatch chooses)."""
    names = call.op.derivative.inputs  # type: ignore[union-attr]
    inputs = call.inputs
    if _transforms_active():
        return _Function.apply(call, choice, *[inputs.get(name) for name in names])
    if len(names) == 1:
        t = inputs.get(names[0])
        return _c_apply(call, choice, None if t is None else _unwrap_if_dead(t))
    return _c_apply(call, choice, *[None if t is None else _unwrap_if_dead(t) for t in map(inputs.get, names)])


def register(op: Op, qualname: str, names: Sequence[str]) -> None:
    """Register ``op``'s derivative as the autograd formula of the custom op ``qualname``, whose arguments are
    ``names`` (in schema order)."""
    derivative = op.derivative
    if derivative is None:
        raise ValueError(f"{op.name} declares no derivative")
    positions = {name: i for i, name in enumerate(names)}

    def setup_context(ctx: Any, inputs: tuple, output: Any) -> None:
        call = op.check(**dict(zip(names, inputs)))
        outs = as_tuple(output)
        keep(ctx, derivative.save(call, outs))
        ctx.plugin = dispatch.forced_plugin()
        if len(outs) > 1:
            ctx.mark_non_differentiable(*outs[1:])

    def backward(ctx: Any, grads: Any) -> tuple:
        grad = grads[0] if isinstance(grads, (tuple, list)) else grads
        with forced(ctx.plugin), dispatch.through_library():
            found = derivative.backward(kept(ctx), grad)
        result: list[torch.Tensor | None] = [None] * len(names)
        for name in derivative.inputs:
            if name in positions:
                result[positions[name]] = found.get(name)
        # one gradient per argument passed: the dispatcher leaves out trailing arguments equal to their defaults
        return tuple(result[:len(ctx.needs_input_grad)])

    torch.library.register_autograd(qualname, backward, setup_context=setup_context)
