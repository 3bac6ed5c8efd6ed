"""Autograd through kernelzoo.ops.linear, conv2d and max_pool2d (their backward ops: linear_backward,
conv2d_backward, max_pool2d_backward).

For every plugin that can run here, on the CPU and on a GPU if there is one (forced with kernelzoo.use;
the backward runs with the plugin forced for the forward), the outputs and the gradients of a random
upstream gradient match torch.autograd through torch.nn.functional on float64 copies; and
torch.autograd.gradcheck (finite differences) passes for one small case of each op. Inputs are float32,
which every plugin takes on every device.
"""

from __future__ import annotations

import zlib
from collections.abc import Callable
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from kernelzoo_plugins._gemm.spec import reduction_tolerance

import kernelzoo
from kernelzoo import ops
from kernelzoo.registry import registry
from kernelzoo.tolerance import check_close

# One case: an id, the tensor shapes, keyword arguments ("frozen": inputs that do not require grad), and the
# longest sum behind any output or gradient (for the tolerance).
Case = tuple[str, dict[str, Any], dict[str, Any], int]

LINEAR_CASES: list[Case] = [
    ("3d-x-bias", {"x": (3, 5, 17), "weight": (9, 17), "bias": (9,)}, {}, 17),
    ("no-bias", {"x": (7, 33), "weight": (4, 33)}, {}, 33),
    ("vector-x", {"x": (17,), "weight": (9, 17), "bias": (9,)}, {}, 17),
    ("weight-only-grad", {"x": (6, 8), "weight": (5, 8), "bias": (5,)}, {"frozen": ("x",)}, 8),
]
CONV_CASES: list[Case] = [
    ("stride2-pad1-bias", {"x": (2, 3, 9, 8), "weight": (5, 3, 3, 3), "bias": (5,)}, {"stride": 2, "padding": 1}, 36),
    ("dilation2-no-bias", {"x": (1, 2, 9, 9), "weight": (4, 2, 3, 3)}, {"padding": 2, "dilation": 2}, 81),
    ("unbatched-pairs", {"x": (3, 7, 8), "weight": (4, 3, 2, 3), "bias": (4,)},
     {"stride": (2, 1), "padding": (1, 0)}, 56),
    ("1x1", {"x": (2, 4, 5, 6), "weight": (3, 4, 1, 1), "bias": (3,)}, {}, 60),
]
POOL_CASES: list[Case] = [
    ("k3-s2-p1", {"x": (2, 3, 9, 8)}, {"kernel_size": 3, "stride": 2, "padding": 1}, 4),
    ("overlapping-k3-s1-p1", {"x": (2, 3, 6, 7)}, {"kernel_size": 3, "stride": 1, "padding": 1}, 9),
    ("unbatched-k2", {"x": (3, 7, 6)}, {"kernel_size": 2}, 1),
]
OPS: dict[str, tuple[Callable, list[Case]]] = {
    "linear": (F.linear, LINEAR_CASES),
    "conv2d": (F.conv2d, CONV_CASES),
    "max_pool2d": (F.max_pool2d, POOL_CASES),
}


DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])


def plugins(op: str, device: str) -> list[str]:
    """Plugins of op and of its backward op that can run on ``device`` here."""
    def runnable(name: str) -> set[str]:
        return {impl.plugin for impl in registry.implementations(name)
                if registry.availability(impl) and device in impl.devices()}
    return sorted(runnable(op) & runnable(f"{op}_backward"))


def make_inputs(case_id: str, shapes: dict[str, Any], kwargs: dict[str, Any], device: str) -> dict[str, torch.Tensor]:
    """float32 inputs; max_pool2d's are distinct values at least 0.01 apart, so that no perturbation of
    the finite differences changes which element a window takes."""
    g = torch.Generator().manual_seed(zlib.crc32(case_id.encode()))
    frozen = kwargs.get("frozen", ())
    tensors = {}
    for name, shape in shapes.items():
        if "kernel_size" in kwargs:
            n = torch.Size(shape).numel()
            t = (torch.randperm(n, generator=g).float() * 0.01).view(shape)
        else:
            t = torch.randn(shape, generator=g)
        tensors[name] = t.to(device).requires_grad_(name not in frozen)
    return tensors


def call_args(tensors: dict[str, torch.Tensor], kwargs: dict[str, Any]) -> tuple[tuple, dict]:
    return tuple(tensors.values()), {k: v for k, v in kwargs.items() if k != "frozen"}


def params() -> list[Any]:
    return [pytest.param(op, device, plugin, case, id=f"{op}-{plugin}-{device}-{case[0]}")
            for op, (_, cases) in OPS.items() for device in DEVICES for plugin in plugins(op, device)
            for case in cases]


@pytest.mark.parametrize(("op", "device", "plugin", "case"), params())
def test_gradients_match_torch_autograd(op: str, device: str, plugin: str, case: Case) -> None:
    case_id, shapes, kwargs, longest = case
    reference_fn = OPS[op][0]
    tensors = make_inputs(case_id, shapes, kwargs, device)
    args, kw = call_args(tensors, kwargs)
    with kernelzoo.use(plugin):
        out = getattr(ops, op)(*args, **kw)
    assert isinstance(out, torch.Tensor) and out.requires_grad

    reference_inputs = {k: v.detach().double().requires_grad_(v.requires_grad) for k, v in tensors.items()}
    ref_args, _ = call_args(reference_inputs, kwargs)
    ref = reference_fn(*ref_args, **kw)
    upstream = torch.randn(ref.shape, generator=torch.Generator().manual_seed(1), dtype=torch.float64).to(device)
    out.backward(upstream.float())
    ref.backward(upstream)

    tol = reduction_tolerance(torch.float32, longest + 1)
    assert check_close(out, ref, tol) is None, f"output: {check_close(out, ref, tol)}"
    for name, t in tensors.items():
        want = reference_inputs[name].grad
        if not t.requires_grad:
            assert t.grad is None
            continue
        mismatch = check_close(t.grad, want, tol)
        assert mismatch is None, f"grad of {name}: {mismatch}"


# Tiny: gradcheck runs the forward twice per input element and the backward once per output element
GRADCHECK_CASES: dict[str, Case] = {
    "linear": ("gradcheck-linear", {"x": (2, 3), "weight": (4, 3), "bias": (4,)}, {}, 3),
    "conv2d": ("gradcheck-conv2d", {"x": (1, 2, 4, 3), "weight": (2, 2, 2, 2), "bias": (2,)},
               {"stride": (2, 1), "padding": 1}, 8),
    "max_pool2d": ("gradcheck-max_pool2d", {"x": (1, 2, 4, 5)}, {"kernel_size": 3, "stride": 1, "padding": 1}, 9),
}


@pytest.mark.parametrize(("op", "device", "plugin"), [pytest.param(op, device, plugin, id=f"{op}-{plugin}-{device}")
                                                      for op in OPS for device in DEVICES
                                                      for plugin in plugins(op, device)])
@pytest.mark.filterwarnings("ignore:Input #\\d+ requires gradient and is not a double")
def test_gradcheck_finite_differences(op: str, device: str, plugin: str) -> None:
    # float32 in and out (the ops take no float64): central differences with eps 1e-3 carry the outputs'
    # rounding (~1e-7 of values ~10) divided by eps, ~1e-3; the ops are linear in each input (max_pool2d
    # piecewise, its values 0.01 apart), so the differences are otherwise exact.
    case_id, shapes, kwargs, _ = GRADCHECK_CASES[op]
    tensors = make_inputs(case_id, shapes, kwargs, device)
    names = list(tensors)
    _, kw = call_args(tensors, kwargs)

    def fn(*inputs: torch.Tensor) -> torch.Tensor:
        with kernelzoo.use(plugin):
            return getattr(ops, op)(*inputs, **kw)

    assert torch.autograd.gradcheck(fn, tuple(tensors[n] for n in names), eps=1e-3, atol=5e-3, rtol=5e-3)


def test_no_graph_without_grad() -> None:
    x, w = torch.randn(4, 6), torch.randn(3, 6, requires_grad=True)
    with torch.no_grad():
        assert not ops.linear(x, w).requires_grad
    assert not ops.conv2d(torch.randn(1, 2, 5, 5), torch.randn(3, 2, 3, 3)).requires_grad
    out = ops.max_pool2d(torch.randn(1, 2, 5, 5), 2)
    assert isinstance(out, torch.Tensor) and not out.requires_grad  # the indices stay internal
