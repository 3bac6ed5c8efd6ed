"""gelu beyond the conformance cases: every CPU plugin over a dense sweep of x (where erf and
tanh round hardest, the far tails, values near FLT_MAX), and the spec's parameter handling."""

from __future__ import annotations

import pytest
import torch

import kernelzoo
from kernelzoo.backends import triton as triton_backend
from kernelzoo.errors import ArgumentError
from kernelzoo.registry import registry
from kernelzoo.tolerance import check_close

# not torch: its vectorised CPU kernel gives inf for x near FLT_MAX (gelu(3.4e38) = inf), and
# NaN for +inf (pytorch/pytorch#185770, patched in the torch plugin)
_PLUGINS = ["python", "openmp"] + (["triton"] if triton_backend.interpreting() else [])
# -12..12 every 1.2e-4 (the whole curved part), small magnitudes, powers of ten up to 1e38, specials
_SWEEP = torch.cat([
    torch.linspace(-12, 12, 200_001),
    torch.randn(20_000, generator=torch.Generator().manual_seed(0)) * 1e-3,
    torch.logspace(-30, 38, 500),
    -torch.logspace(-30, 38, 500),
    torch.tensor([3.4e38, -3.4e38, 0.0, -0.0, float("inf"), float("-inf"), float("nan")]),
])


# the interpreter's numpy warns about exp overflowing to inf and -inf / inf: both intended
@pytest.mark.filterwarnings("ignore::RuntimeWarning")
@pytest.mark.parametrize("approximate", ["none", "tanh"])
@pytest.mark.parametrize("plugin", _PLUGINS)
def test_sweep_within_float32_tolerance(plugin, approximate):
    impl = registry.impl("gelu", plugin)
    if not registry.availability(impl):
        pytest.skip(registry.availability(impl).reason)
    op = registry.op("gelu")
    call = op.check(_SWEEP, approximate=approximate)
    out = impl.run(call, impl.config())
    assert check_close(out, op.reference(call), op.tolerance(call)) is None


def test_infinities_follow_torch():
    x = torch.tensor([float("inf"), float("-inf"), -0.0], dtype=torch.float64)
    for approximate in ("none", "tanh"):
        ref = registry.op("gelu").reference(registry.op("gelu").check(x.float(), approximate=approximate))
        assert ref[0] == float("inf") and ref[1].isnan() and ref[2] == 0 and ref[2].signbit()


def test_params():
    op = registry.op("gelu")
    assert op.check(torch.ones(2)).params == {"approximate": "none"}
    assert op.check(torch.ones(2), approximate="tanh").params == {"approximate": "tanh"}
    with pytest.raises(ArgumentError, match="approximate must be 'none' or 'tanh', got 'Tanh'"):
        kernelzoo.ops.gelu(torch.ones(2), approximate="Tanh")
    with pytest.raises(TypeError):  # no such argument: Python's own error from the signature
        op.check(torch.ones(2), approx="tanh")


def test_flops_count_the_variant():
    op = registry.op("gelu")
    x = torch.ones(10, 10)
    assert op.flops(op.check(x)) == 500 and op.flops(op.check(x, approximate="tanh")) == 900
