"""mytorch's graph and backward pass: accumulation, deep graphs, freed saved tensors, no_grad,
detach, devices, custom Functions, the trace table."""

from __future__ import annotations

import pytest
import torch

import mytorch
from mytorch import Function


def test_gradient_accumulates_over_uses_and_over_backward_calls() -> None:
    x = mytorch.tensor([1.0, 2.0, 3.0], requires_grad=True)
    y = (x * x + x * 3.0).sum()  # dy/dx = 2x + 3, x used twice in the graph
    y.backward(retain_graph=True)
    assert x.grad.tolist() == [5.0, 7.0, 9.0]
    y.backward()
    assert x.grad.tolist() == [10.0, 14.0, 18.0]


def test_second_backward_without_retain_graph_is_refused() -> None:
    x = mytorch.tensor([1.0, 2.0], requires_grad=True)
    y = (x.exp() * 2.0).sum()
    y.backward()
    with pytest.raises(RuntimeError, match="second time"):
        y.backward()


def test_deep_graph_of_ten_thousand_nodes_needs_no_recursion() -> None:
    x = mytorch.tensor([0.5], requires_grad=True)
    y = x
    for _ in range(12_000):
        y = y + 0.001
    (y * 2.0).sum().backward()
    assert len(mytorch.autograd.graph_nodes(y)) == 12_000
    assert x.grad.tolist() == [2.0]


def test_only_inputs_that_require_grad_get_one() -> None:
    a = mytorch.randn(3, 4, requires_grad=True)
    b = mytorch.randn(3, 4)
    (a * b).sum().backward()
    assert a.grad is not None and b.grad is None
    torch.testing.assert_close(a.grad.data, b.data)


def test_no_grad_and_detach_record_nothing() -> None:
    a = mytorch.randn(3, requires_grad=True)
    with mytorch.no_grad():
        b = a * 2.0
    assert not b.requires_grad and b.grad_fn is None
    c = a.detach() * 2.0
    assert not c.requires_grad
    assert c.data.data_ptr() != a.data.data_ptr() and a.detach().data.data_ptr() == a.data.data_ptr()
    with pytest.raises(RuntimeError, match="does not require grad"):
        c.sum().backward()


def test_backward_needs_a_gradient_for_non_scalar_outputs() -> None:
    a = mytorch.randn(3, requires_grad=True)
    with pytest.raises(RuntimeError, match="only one-element outputs"):
        (a * 2.0).backward()


def test_mixing_devices_in_one_op_is_a_clear_error() -> None:
    a = mytorch.randn(3)
    b = mytorch.from_torch(torch.empty(3, device="meta"))
    with pytest.raises(RuntimeError, match="different devices"):
        _ = a + b


def test_to_moves_and_casts_differentiably() -> None:
    a = mytorch.randn(4, requires_grad=True)
    b = a.to(torch.float16)
    assert b.dtype == torch.float16 and b.requires_grad
    b.to(torch.float32).sum().backward()
    assert a.grad.dtype == torch.float32 and a.grad.tolist() == [1.0] * 4


def test_views_share_memory_and_view_refuses_incompatible_strides() -> None:
    a = mytorch.randn(4, 6)
    assert a.view(24).data.data_ptr() == a.data.data_ptr()
    assert a.transpose(0, 1).data.data_ptr() == a.data.data_ptr()
    with pytest.raises(RuntimeError):
        a.transpose(0, 1).view(24)
    assert a.transpose(0, 1).reshape(24).tolist() == a.data.t().reshape(24).tolist()


def test_advanced_indexing_is_refused_with_a_reason() -> None:
    with pytest.raises(TypeError, match="basic indexing"):
        _ = mytorch.randn(4)[mytorch.tensor([0, 1])]


class Cube(Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        from kernelzoo import ops
        return ops.mul(ops.mul(x, x), x)

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        from kernelzoo import ops
        return ops.mul(grad, ops.mul(ops.mul(x, x), torch.tensor(3.0)))


def test_a_user_function_takes_part_in_the_graph() -> None:
    x = mytorch.tensor([1.0, -2.0], requires_grad=True)
    Cube.apply(x).sum().backward()
    assert x.grad.tolist() == [3.0, 12.0]


def test_trace_records_each_op_with_its_plugin() -> None:
    x = mytorch.randn(8, 8, requires_grad=True)
    with mytorch.trace(print_table=False) as t:
        (x @ x).relu().sum().backward()
    ops_seen = {op for op, *_ in t.entries}
    assert {"matmul", "relu", "sum", "relu_backward", "copy_"} <= ops_seen
    assert all(e.calls > 0 and e.seconds >= 0 for e in t.entries.values())
    table = t.table()
    assert "matmul" in table.splitlines()[1] or "matmul" in table
    assert table.splitlines()[-1].startswith("total")
