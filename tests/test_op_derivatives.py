"""The derivatives declared for the elementwise ops, pow, dropout and matmul.

``kernelzoo.ops.<op>`` on inputs that require grad records a backward whatever plugin runs: for the python and
openmp plugins forced (with kernelzoo.use, which the backward keeps) and for dispatch's own choice, the
gradients of a random upstream gradient match torch.autograd on float64 copies of the float32 inputs,
broadcasting inputs (summed back) and batched matmuls included. relu and matmul also compile whole (Inductor,
CPU) with eager's gradients. Ops without a derivative keep outputs that require no grad.
"""

from __future__ import annotations

import contextlib
import zlib
from collections.abc import Callable

import pytest
import torch

import kernelzoo
from kernelzoo import ops
from kernelzoo.registry import registry

F = torch.nn.functional

# (id, op, function of the module given (kernelzoo.ops or torch) and the inputs, input shapes, positive inputs?)
CASES: list[tuple[str, str, Callable, tuple[tuple[int, ...], ...], bool]] = [
    ("relu", "relu", lambda m, x: m.relu(x), ((5, 7),), False),
    ("gelu", "gelu", lambda m, x: m.gelu(x) if m is ops else F.gelu(x), ((5, 7),), False),
    ("gelu-tanh", "gelu", lambda m, x: m.gelu(x, approximate="tanh") if m is ops else F.gelu(x, approximate="tanh"),
     ((5, 7),), False),
    ("exp", "exp", lambda m, x: m.exp(x), ((5, 7),), False),
    ("tanh", "tanh", lambda m, x: m.tanh(x), ((5, 7),), False),
    ("log", "log", lambda m, x: m.log(x), ((5, 7),), True),
    ("pow-2.5", "pow", lambda m, x: m.pow(x, 2.5), ((5, 7),), True),
    ("pow-2", "pow", lambda m, x: m.pow(x, 2.0), ((5, 7),), False),
    ("pow-0", "pow", lambda m, x: m.pow(x, 0.0), ((5, 7),), False),
    ("pow--1", "pow", lambda m, x: m.pow(x, -1.0), ((5, 7),), True),
    ("add", "add", lambda m, a, b: m.add(a, b), ((5, 7), (5, 7)), False),
    ("add-alpha-broadcast", "add", lambda m, a, b: m.add(a, b, alpha=-0.5), ((2, 5, 7), (5, 1)), False),
    ("add-scalar", "add", lambda m, a, b: m.add(a, b), ((5, 7), ()), False),
    ("mul", "mul", lambda m, a, b: m.mul(a, b), ((5, 7), (5, 7)), False),
    ("mul-broadcast", "mul", lambda m, a, b: m.mul(a, b), ((3, 1, 7), (5, 1)), False),
    ("div", "div", lambda m, a, b: m.div(a, b), ((5, 7), (5, 7)), True),
    ("div-broadcast", "div", lambda m, a, b: m.div(a, b), ((7,), (2, 5, 1)), True),
    ("matmul", "matmul", lambda m, a, b: m.matmul(a, b), ((5, 6), (6, 7)), False),
    ("matmul-batched", "matmul", lambda m, a, b: m.matmul(a, b), ((3, 5, 6), (3, 6, 7)), False),
    ("matmul-2d-by-3d", "matmul", lambda m, a, b: m.matmul(a, b), ((5, 6), (3, 6, 7)), False),
    ("matmul-3d-by-2d", "matmul", lambda m, a, b: m.matmul(a, b), ((3, 5, 6), (6, 7)), False),
    ("matmul-batch-of-1", "matmul", lambda m, a, b: m.matmul(a, b), ((1, 5, 6), (3, 6, 7)), False),
]
PLUGINS = ("auto", "python", "openmp")


def _runs(op: str, plugin: str) -> bool:
    if plugin == "auto":
        return True
    return any(impl.plugin == plugin and registry.availability(impl) and "cpu" in impl.devices()
               for impl in registry.implementations(op))


def _inputs(case_id: str, shapes: tuple, positive: bool) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(zlib.crc32(case_id.encode()))
    xs = [torch.randn(shape, generator=g) for shape in shapes]
    return [(x.abs() + 0.5 if positive else x).requires_grad_() for x in xs]


def _torch_grads(fn: Callable, xs: list[torch.Tensor], upstream: torch.Tensor) -> tuple[torch.Tensor, ...]:
    xs64 = [x.detach().double().requires_grad_() for x in xs]
    return torch.autograd.grad(fn(torch, *xs64), xs64, upstream.double())


def params() -> list:
    found = []
    for case in CASES:
        for plugin in PLUGINS:
            marks = () if _runs(case[1], plugin) else pytest.mark.skip(reason=f"no {plugin} plugin of {case[1]} "
                                                                               "runs on this machine")
            found.append(pytest.param(case, plugin, id=f"{case[0]}-{plugin}", marks=marks))
    return found


@pytest.mark.parametrize(("case", "plugin"), params())
def test_gradients_match_torch_autograd(case: tuple, plugin: str) -> None:
    case_id, _, fn, shapes, positive = case
    xs = _inputs(case_id, shapes, positive)
    with kernelzoo.use(plugin) if plugin != "auto" else contextlib.nullcontext():
        out = fn(ops, *xs)
        assert out.requires_grad and out.grad_fn is not None
        upstream = torch.randn(out.shape, generator=torch.Generator().manual_seed(1))
        grads = torch.autograd.grad(out, xs, upstream)
    for x, got, want in zip(xs, grads, _torch_grads(fn, xs, upstream)):
        assert got.shape == x.shape and got.dtype == torch.float32
        torch.testing.assert_close(got.double(), want, rtol=1e-4, atol=1e-4)


def test_only_the_inputs_that_require_grad_get_one() -> None:
    a = torch.randn(4, 3)
    b = torch.randn(3, 5, requires_grad=True)
    out = ops.matmul(a, b)
    upstream = torch.randn(4, 5)
    (grad_b,) = torch.autograd.grad(out, b, upstream)
    torch.testing.assert_close(grad_b, a.T @ upstream)


@pytest.mark.parametrize("plugin", [p for p in PLUGINS if _runs("dropout", p)])
def test_dropout_gradient_is_the_forward_mask_and_scale(plugin: str) -> None:
    x = (torch.randn(64, 33, generator=torch.Generator().manual_seed(3)).abs() + 0.5).requires_grad_()
    with kernelzoo.use(plugin) if plugin != "auto" else contextlib.nullcontext():
        out = ops.dropout(x, 0.25, 7)
        upstream = torch.randn(out.shape, generator=torch.Generator().manual_seed(4))
        (grad,) = torch.autograd.grad(out, x, upstream)
    kept = out.detach() != 0  # x is positive: a zero output is a dropped element
    assert 0 < int(kept.sum()) < kept.numel()
    torch.testing.assert_close(grad, torch.where(kept, upstream / 0.75, 0.0))


@pytest.mark.parametrize("op", ["relu_backward", "gelu_backward"])
def test_ops_without_a_derivative_record_no_backward(op: str) -> None:
    """The op runs as before, its outputs what the implementation gives: a compiled kernel's require no grad."""
    if not _runs(op, "openmp"):
        pytest.skip(f"no openmp plugin of {op} runs on this machine")
    grad, x = torch.randn(4, 5, requires_grad=True), torch.randn(4, 5, requires_grad=True)
    assert registry.op(op).derivative is None
    with kernelzoo.use("openmp"):
        out = getattr(ops, op)(grad, x)
    assert not out.requires_grad and out.grad_fn is None


@pytest.fixture
def _fresh_compiles():
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


@pytest.mark.usefixtures("_fresh_compiles")
@pytest.mark.parametrize("case_id", ["relu", "matmul-2d-by-3d"])
def test_compiled_gradients_match_torch_autograd(case_id: str) -> None:
    _, _, fn, shapes, positive = next(case for case in CASES if case[0] == case_id)
    xs = _inputs(case_id, shapes, positive)
    compiled = torch.compile(lambda *args: fn(ops, *args), fullgraph=True)  # Inductor, CPU
    out = compiled(*xs)
    assert torch._dynamo.utils.counters["graph_break"] == {}
    upstream = torch.randn(out.shape, generator=torch.Generator().manual_seed(1))
    grads = torch.autograd.grad(out, xs, upstream)
    for got, want in zip(grads, _torch_grads(fn, xs, upstream)):
        torch.testing.assert_close(got.double(), want, rtol=1e-4, atol=1e-4)


def test_a_second_derivative_is_refused() -> None:
    """The backward runs once, as a derivative's backward is declared: a graph built of it (create_graph) refuses
    to be differentiated again rather than giving a wrong second derivative."""
    x = torch.randn(4, 5, requires_grad=True)
    upstream = torch.randn(4, 5, requires_grad=True)
    (grad,) = torch.autograd.grad(ops.relu(x), x, upstream, create_graph=True)
    assert grad.requires_grad
    with pytest.raises(RuntimeError, match="differentiate twice"):
        grad.sum().backward()
