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
from typing import TYPE_CHECKING, Any

import torch

if TYPE_CHECKING:
    from mytorch.tensor import Tensor

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

    def __init__(self, needs_input_grad: tuple[bool, ...]) -> None:
        self.needs_input_grad = needs_input_grad
        self._saved: tuple[torch.Tensor | None, ...] | None = ()
        self.non_differentiable: set[int] = set()

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
        self.non_differentiable.update(output_indices)

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
        tensor_type = _tensor_type()
        raw, needs, where = [], [], None
        for a in args:
            if isinstance(a, tensor_type):
                data = a.data
                raw.append(data)
                needs.append(a.requires_grad)
                device = data.get_device() if data.is_cuda else data.device  # an int: no torch.device made
                if where is None:
                    where = device
                elif device != where:
                    devices = ", ".join(str(t.device) for t in args if isinstance(t, tensor_type))
                    raise RuntimeError(f"mytorch: {cls.__name__}: tensors on different devices ({devices}); "
                                       f"move them to one device with .to()")
            else:
                raw.append(a)
                needs.append(False)
        needs = tuple(needs)
        record = _grad_enabled.get() and any(needs)
        ctx = Context(needs)
        token = _grad_enabled.set(False)
        try:
            out = cls.forward(ctx, *raw, **kwargs)
        finally:
            _grad_enabled.reset(token)
        node = None
        if record:
            inputs = [_edge(a) if need else None for a, need in zip(args, needs)]
            node = Node(cls, ctx, inputs, 1 if not isinstance(out, tuple) else len(out))
        if not isinstance(out, tuple):
            if node is None or 0 in ctx.non_differentiable:
                return tensor_type(out)
            return tensor_type(out, requires_grad=out.is_floating_point(), _node=(node, 0))
        return tuple(
            tensor_type(o, requires_grad=node is not None and i not in ctx.non_differentiable and o.is_floating_point(),
                        _node=(node, i) if node is not None and i not in ctx.non_differentiable else None)
            for i, o in enumerate(out))


_tensor_class: list[type] = []


def _tensor_type() -> type[Tensor]:
    """mytorch.Tensor (imported on first use: tensor.py imports this module)."""
    if not _tensor_class:
        from mytorch.tensor import Tensor

        _tensor_class.append(Tensor)
    return _tensor_class[0]


def _edge(t: Tensor) -> Any:
    return t._node if t._node is not None else t


def _accumulate(old: torch.Tensor | None, new: torch.Tensor) -> torch.Tensor:
    from kernelzoo import ops

    return new if old is None else ops.add(old, new)


def backward(root: Tensor, grad: torch.Tensor, retain_graph: bool = False) -> None:
    """Propagate ``grad`` (d something / d root) to every leaf of root's graph that requires grad.

    Nodes are visited in reverse topological order, found by an explicit stack (graphs of any
    depth, no recursion); each node's output gradients are summed before its backward runs.
    """
    if root._node is None:
        _deposit(root, grad)
        return
    order = _topological(root._node[0])
    pending: dict[int, list[torch.Tensor | None]] = {id(root._node[0]): [None] * root._node[0].outputs}
    pending[id(root._node[0])][root._node[1]] = grad
    with no_grad():
        for node in reversed(order):
            grads = pending.pop(id(node), None)
            if grads is None:  # nothing flowed into this node (its outputs' gradients were None)
                continue
            results = node.function.backward(node.ctx, *grads)
            results = results if isinstance(results, tuple) else (results,)
            if len(results) < len(node.inputs):
                raise RuntimeError(f"mytorch: {node.name}.backward returned {len(results)} gradients for "
                                   f"{len(node.inputs)} inputs")
            if not retain_graph:
                node.ctx.free()
            for edge, g in zip(node.inputs, results):
                if edge is None or g is None:
                    continue
                if isinstance(edge, tuple):
                    parent, index = edge
                    slots = pending.setdefault(id(parent), [None] * parent.outputs)
                    slots[index] = _accumulate(slots[index], g)
                else:
                    _deposit(edge, g)


def _deposit(leaf: Tensor, grad: torch.Tensor) -> None:
    from mytorch.tensor import Tensor

    if tuple(grad.shape) != tuple(leaf.shape):
        raise RuntimeError(f"mytorch: gradient of shape {tuple(grad.shape)} for a tensor of shape "
                           f"{tuple(leaf.shape)}")
    leaf.grad = Tensor(grad) if leaf.grad is None else Tensor(_accumulate(leaf.grad.data, grad))


def _topological(start: Node) -> list[Node]:
    """Nodes reachable from ``start`` in post-order: each after the nodes that made its inputs."""
    order: list[Node] = []
    seen = {id(start)}
    stack: list[tuple[Node, Iterator[Any]]] = [(start, iter(start.inputs))]
    while stack:
        node, edges = stack[-1]
        for edge in edges:
            if isinstance(edge, tuple) and id(edge[0]) not in seen:
                seen.add(id(edge[0]))
                stack.append((edge[0], iter(edge[0].inputs)))
                break
        else:
            stack.pop()
            order.append(node)
    return order


def graph_nodes(root: Tensor) -> Sequence[Node]:
    """The nodes behind ``root``, inputs first (for inspection and tests)."""
    return [] if root._node is None else _topological(root._node[0])
