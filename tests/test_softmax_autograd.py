"""Autograd through kernelzoo.ops.softmax (its backward op: softmax_backward).

For every plugin of both ops that can run here, on the CPU and on a GPU if there is one (forced with
kernelzoo.use; the backward runs with the plugin forced for the forward), the output and the gradient of a
random upstream gradient match torch.autograd through torch.softmax on float64 copies; and
torch.autograd.gradcheck (finite differences) passes for one small case. Inputs are float32, which every
plugin takes on every device.
"""

from __future__ import annotations

import zlib

import pytest
import torch

import kernelzoo
from kernelzoo import ops
from kernelzoo.registry import registry
from kernelzoo.tolerance import check_close, tolerance_for

DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])

# (id, shape, dim): rows that fit a block, long rows (looped and split paths, also in Triton's interpreter,
# which splits below 16 rows), a middle dim (the output is a view with dim moved back), a 0-dim x
CASES = [
    ("17x33-dim=-1", (17, 33), -1),
    ("3x5000-dim=1", (3, 5000), 1),
    ("33x4099-dim=-1", (33, 4099), -1),
    ("7x33x5-dim=1", (7, 33, 5), 1),
    ("1023x5-dim=0", (1023, 5), 0),
    ("scalar", (), 0),
]


def plugins(device: str) -> list[str]:
    """Plugins of softmax and of softmax_backward that can run on ``device`` here."""
    def runnable(name: str) -> set[str]:
        return {impl.plugin for impl in registry.implementations(name)
                if registry.availability(impl) and device in impl.devices()}
    return sorted(runnable("softmax") & runnable("softmax_backward"))


def params() -> list:
    return [pytest.param(device, plugin, case, id=f"softmax-{plugin}-{device}-{case[0]}")
            for device in DEVICES for plugin in plugins(device) for case in CASES]


@pytest.mark.parametrize(("device", "plugin", "case"), params())
def test_gradient_matches_torch_autograd(device: str, plugin: str, case: tuple) -> None:
    case_id, shape, dim = case
    g = torch.Generator().manual_seed(zlib.crc32(case_id.encode()))
    x = (torch.randn(shape, generator=g) * 3).to(device).requires_grad_()
    upstream = torch.randn(shape, generator=g, dtype=torch.float64).to(device)
    with kernelzoo.use(plugin):
        y = ops.softmax(x, dim)
    assert y.requires_grad and y.shape == x.shape
    y.backward(upstream.float())

    x64 = x.detach().double().requires_grad_()
    y64 = torch.softmax(x64, dim)
    y64.backward(upstream)
    tol = tolerance_for(torch.float32)
    assert check_close(y, y64, tol) is None, f"output: {check_close(y, y64, tol)}"
    mismatch = check_close(x.grad, x64.grad, tol)
    assert mismatch is None, f"grad of x: {mismatch}"


@pytest.mark.parametrize(("device", "plugin"), [pytest.param(d, p, id=f"softmax-{p}-{d}")
                                                for d in DEVICES for p in plugins(d)])
@pytest.mark.filterwarnings("ignore:Input #\\d+ requires gradient and is not a double")
def test_gradcheck_finite_differences(device: str, plugin: str) -> None:
    # float32 in and out (the ops take no float64): central differences with eps 1e-3 carry the outputs'
    # rounding (~6e-8 of values <= 1) divided by eps, ~1e-4, and a truncation error of eps² times the third
    # derivative (<= 1), ~1e-6: well inside 1e-3.
    x = torch.randn((3, 7), generator=torch.Generator().manual_seed(0)).to(device).requires_grad_()

    def fn(t: torch.Tensor) -> torch.Tensor:
        with kernelzoo.use(plugin):
            return ops.softmax(t, 1)

    assert torch.autograd.gradcheck(fn, (x,), eps=1e-3, atol=1e-3, rtol=1e-3)


def test_backward_runs_the_forced_plugin(monkeypatch: pytest.MonkeyPatch) -> None:
    impl = registry.impl("softmax_backward", "python")
    runs = []
    original = impl.run
    monkeypatch.setattr(impl, "run", lambda call, config: runs.append(call) or original(call, config))
    x = torch.randn(4, 9, requires_grad=True)
    with kernelzoo.use("python"):
        y = ops.softmax(x, -1)
    y.sum().backward()  # outside the `with`: the forward's choice still holds
    assert len(runs) == 1
    assert x.grad.abs().max() < 1e-6  # softmax rows sum to 1: a constant upstream gradient gives 0


def test_no_graph_without_grad() -> None:
    x = torch.randn(4, 6, requires_grad=True)
    with torch.no_grad():
        assert not ops.softmax(x).requires_grad
    assert not ops.softmax(torch.randn(4, 6)).requires_grad
