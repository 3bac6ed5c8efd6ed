"""Property tests of matmul: random shapes (M, N, K in 0..80; 2-D, batched, broadcast batches),
memory orders and configs, every plugin that runs here against the float64 reference."""

from __future__ import annotations

import pytest
import torch
from hypothesis import HealthCheck, given, reject, settings
from hypothesis import strategies as st

from kernelzoo.errors import UnsupportedError
from kernelzoo.registry import dtype_name, randn, registry
from kernelzoo.tolerance import check_close

DEVICES = ("cpu", "cuda") if torch.cuda.is_available() else ("cpu",)
PLUGINS = ("python", "openmp", "torch", "triton", "cuda")
# Triton runs in its interpreter on the CPU: fewer examples keep the file well under 30 s there
EXAMPLES = {"python": 40, "openmp": 60, "torch": 40, "triton": 25, "cuda": 40}

sizes = st.integers(min_value=0, max_value=80)


@st.composite
def operands(draw: st.DrawFn, device: str, dtypes: tuple[torch.dtype, ...]) -> tuple[torch.Tensor, torch.Tensor]:
    m, n, k = draw(sizes), draw(sizes), draw(sizes)
    dtype = draw(st.sampled_from(dtypes))
    # batches of a and b: None is 2-D; (1, 3) and (None, 3) broadcast a against b's batch
    batch_a, batch_b = draw(st.sampled_from([(None, None), (2, 2), (3, 3), (1, 3), (3, 1), (None, 3), (3, None)]))
    g = torch.Generator().manual_seed(draw(st.integers(0, 2**31 - 1)))

    def make(batch: int | None, rows: int, cols: int, transposed: bool) -> torch.Tensor:
        lead = () if batch is None else (batch,)
        if transposed:  # the same values in the other memory order: a non-contiguous view
            return randn((*lead, cols, rows), device, dtype, g).transpose(-1, -2)
        return randn((*lead, rows, cols), device, dtype, g)

    return make(batch_a, m, k, draw(st.booleans())), make(batch_b, k, n, draw(st.booleans()))


def _params():
    for device in DEVICES:
        for plugin in PLUGINS:
            yield pytest.param(plugin, device, id=f"matmul-{plugin}-{device}")


@pytest.mark.parametrize(("plugin", "device"), list(_params()))
def test_matmul_matches_reference(plugin: str, device: str) -> None:
    impl = registry.impl("matmul", plugin)
    availability = registry.availability(impl)
    if not availability:
        pytest.skip(f"matmul/{plugin} not available: {availability.reason}")
    if device not in impl.devices() or not impl.dtypes.get(device):
        pytest.skip(f"matmul/{plugin} does not run on {device} in this process")
    op = registry.op("matmul")
    if device == "cpu":  # any point of the space: nothing to compile, or a few cached C builds
        configs = st.fixed_dictionaries({key: st.sampled_from(list(values))
                                         for key, values in impl.config_space.items()})
    else:  # each GPU config is a compile of seconds: the default and the smallest blocks only
        configs = st.sampled_from([{}, {key: values[0] for key, values in impl.config_space.items()}])

    @settings(max_examples=EXAMPLES[plugin], deadline=None, derandomize=True,
              suppress_health_check=[HealthCheck.too_slow])
    @given(ab=operands(device, tuple(impl.dtypes[device])), config=configs)
    def check(ab: tuple[torch.Tensor, torch.Tensor], config: dict) -> None:
        a, b = ab
        call = op.check(a, b)
        try:
            out = impl.run(call, impl.config(config))
        except UnsupportedError:  # a config this dtype cannot use (shared memory, registers)
            reject()
        assert out.dtype == a.dtype and out.device == a.device
        mismatch = check_close(out, op.reference(call), op.tolerance(call))
        assert mismatch is None, f"{call.describe()} {dtype_name(a.dtype)} with {config}: {mismatch}"

    check()
