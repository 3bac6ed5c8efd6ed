"""Reverse-mode automatic differentiation: Function, its ctx, the graph and the backward pass.

A Function's static ``forward(ctx, *args)`` receives the raw torch tensors behind mytorch
Tensors (torch is memory here, never autograd) and returns raw tensors; its static
``backward(ctx, *grads)`` receives one gradient per output and returns one per input (None
where an input needs none). ``Function.apply`` wraps the outputs and, when gradients are on and
an input requires one, records a :class:`Node` so that :meth:`Tensor.backward` can walk the
graph in reverse topological order.
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Iterator, Sequence
from typing import Any

import torch

from kernelzoo import ops

_grad_enabled: contextvars.ContextVar[bool] = contextvars.ContextVar("mytorch_grad_enabled", default=True)


def is_grad_enabled() -> bool:
    return _grad_enabled.get()


@contextlib.contextmanager
def set_grad_enabled(enabled: bool) -> Iterator[None]:
    token = _grad_enabled.set(enabled)
    try:
        yield
    finally:
        _grad_enabled.reset(token)


def no_grad() -> contextlib.AbstractContextManager[None]:
    """Inside the block, operations record no graph (evaluation, optimizer steps)."""
    return set_grad_enabled(False)


class Context:
    """What a Function's forward leaves for its backward."""

    non_differentiable: frozenset[int] | set[int] = frozenset()  # a set of its own once an output is marked

    def __init__(self, needs_input_grad: tuple[bool, ...]) -> None:
        self.needs_input_grad = needs_input_grad
        self._saved: tuple[torch.Tensor | None, ...] | None = ()

    def save_for_backward(self, *tensors: torch.Tensor | None) -> None:
        self._saved = tensors

    @property
    def saved_tensors(self) -> tuple[torch.Tensor | None, ...]:
        if self._saved is None:
            raise RuntimeError("mytorch: trying to backward through the graph a second time (its saved "
                               "tensors were freed after the first backward); pass retain_graph=True "
                               "to the first backward() to keep them")
        return self._saved

    def mark_non_differentiable(self, *output_indices: int) -> None:
        """Outputs (by position) that get no gradient, e.g. argmax indices."""
        if output_indices:
            self.non_differentiable = {*self.non_differentiable, *output_indices}

    def free(self) -> None:
        self._saved = None


class Node:
    """One recorded Function application: where gradients of its outputs go next.

    ``inputs[i]`` is ``(node, output_index)`` for an input made by another Function, the
    Tensor itself for a leaf that requires grad, or None for an input that needs no gradient.
    """

    __slots__ = ("ctx", "function", "inputs", "outputs")

    def __init__(self, function: type[Function], ctx: Context, inputs: list[Any], outputs: int) -> None:
        self.function, self.ctx, self.inputs, self.outputs = function, ctx, inputs, outputs

    @property
    def name(self) -> str:
        return self.function.__name__

    def __repr__(self) -> str:
        return f"<{self.name}Backward>"


class Function:
    """A differentiable operation: subclass with static ``forward`` and ``backward``."""

    @staticmethod
    def forward(ctx: Context, *args: Any, **kwargs: Any) -> torch.Tensor | tuple[torch.Tensor, ...]:
        raise NotImplementedError

    @staticmethod
    def backward(ctx: Context, *grads: torch.Tensor) -> torch.Tensor | tuple[torch.Tensor | None, ...] | None:
        raise NotImplementedError

    @classmethod
    def apply(cls, *args: Any, **kwargs: Any) -> Any:
        # every op of a model passes through here: the common cases take few Python steps
        raw, needs, where, record = [], [], None, False
        for a in args:
            if isinstance(a, Tensor):
                data = a.data
                raw.append(data)
                needs.append(a.requires_grad)
                record |= a.requires_grad
                device = data.get_device() if data.is_cuda else data.device  # an int on the GPU: no torch.device
                if where is None:
                    where = device
                elif device != where:
                    devices = ", ".join(str(t.device) for t in args if isinstance(t, Tensor))
                    raise RuntimeError(f"mytorch: {cls.__name__}: tensors on different devices ({devices}); "
                                       f"move them to one device with .to()")
            else:
                raw.append(a)
                needs.append(False)
        record = record and _grad_enabled.get()
        # a forward that records nothing needs no gradient (a forward may skip what only its backward reads)
        ctx = Context(tuple(needs) if record else (False,) * len(needs))
        token = _grad_enabled.set(False)
        try:
            out = cls.forward(ctx, *raw, **kwargs)
        finally:
            _grad_enabled.reset(token)
        if not record:
            if isinstance(out, tuple):
                return tuple(_wrap(o, False, None) for o in out)
            return _wrap(out, False, None)
        inputs = [(a._node or a) if need else None for a, need in zip(args, needs)]
        skip = ctx.non_differentiable
        if not isinstance(out, tuple):
            node = Node(cls, ctx, inputs, 1)
            if skip:
                return _wrap(out, False, None)
            return _wrap(out, out.is_floating_point(), (node, 0))
        node = Node(cls, ctx, inputs, len(out))
        return tuple(_wrap(o, False, None) if i in skip else _wrap(o, o.is_floating_point(), (node, i))
                     for i, o in enumerate(out))


def _wrap(data: torch.Tensor, requires_grad: bool, node: tuple[Node, int] | None) -> Tensor:
    """A Tensor on ``data``, made without Tensor()'s argument checks: ``requires_grad`` is only ever set here
    for a floating-point output."""
    if not isinstance(data, torch.Tensor):
        raise TypeError(f"mytorch.Tensor wraps a torch.Tensor, got {type(data).__name__}")
    t = _new(Tensor)
    t.data = data.detach() if data.requires_grad else data
    t.requires_grad, t.grad, t._node = requires_grad, None, node
    return t


_new = object.__new__
# mytorch.Tensor, set by mytorch.tensor once the class exists (that module imports this one)
Tensor: Any = None


def backward(root: Tensor, grad: torch.Tensor, retain_graph: bool = False) -> None:
    """Propagate ``grad`` (d something / d root) to every leaf of root's graph that requires grad.

    Nodes are visited in reverse topological order, found by an explicit stack (graphs of any
    depth, no recursion); each node's output gradients are summed before its backward runs. torch's
    gradient mode is off too: the backward's kernelzoo ops then skip asking whether torch autograd must
    record them.
    """
    if root._node is None:
        _deposit(root, grad)
        return
    start, index = root._node
    order = _topological(start)
    pending: dict[Node, list[torch.Tensor | None]] = {start: [None] * start.outputs}
    pending[start][index] = grad
    add = ops.add
    with no_grad(), torch.no_grad():
        for node in reversed(order):
            grads = pending.pop(node, None)
            if grads is None:  # nothing flowed into this node (its outputs' gradients were None)
                continue
            results = node.function.backward(node.ctx, *grads)
            if not isinstance(results, tuple):
                results = (results,)
            inputs = node.inputs
            if len(results) < len(inputs):
                raise RuntimeError(f"mytorch: {node.name}.backward returned {len(results)} gradients for "
                                   f"{len(inputs)} inputs")
            if not retain_graph:
                node.ctx._saved = None
            for edge, g in zip(inputs, results):
                if edge is None or g is None:
                    continue
                if type(edge) is tuple:
                    parent, i = edge
                    slots = pending.get(parent)
                    if slots is None:
                        slots = pending[parent] = [None] * parent.outputs
                    old = slots[i]
                    slots[i] = g if old is None else add(old, g)
                else:
                    _deposit(edge, g)


def _deposit(leaf: Tensor, grad: torch.Tensor) -> None:
    if grad.shape != leaf.data.shape:
        raise RuntimeError(f"mytorch: gradient of shape {tuple(grad.shape)} for a tensor of shape "
                           f"{tuple(leaf.shape)}")
    leaf.grad = _wrap(grad if leaf.grad is None else ops.add(leaf.grad.data, grad), False, None)


def _topological(start: Node) -> list[Node]:
    """Nodes reachable from ``start`` in post-order: each after the nodes that made its inputs."""
    order: list[Node] = []
    seen = {start}
    stack: list[tuple[Node, Iterator[Any]]] = [(start, iter(start.inputs))]
    while stack:
        node, edges = stack[-1]
        for edge in edges:
            if type(edge) is tuple and edge[0] not in seen:
                seen.add(edge[0])
                stack.append((edge[0], iter(edge[0].inputs)))
                break
        else:
            stack.pop()
            order.append(node)
    return order


def graph_nodes(root: Tensor) -> Sequence[Node]:
    """The nodes behind ``root``, inputs first (for inspection and tests)."""
    return [] if root._node is None else _topological(root._node[0])
