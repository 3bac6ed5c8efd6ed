"""softmax on random shapes (1 to 3 dims, sizes 0 to 300), random dim, random data (offset far
from 0, rows masked with -inf): every plugin that can run here against the float64 reference,
rows summing to 1, shapes and dtypes kept, inputs untouched."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kernelzoo.backends import triton as triton_backend
from kernelzoo.registry import dtype_name, registry
from kernelzoo.tolerance import check_close

# (plugin, device, most elements, examples): the interpreter runs Triton programs in Python
_CPU_TRITON = [("triton", "cpu", 3_000, 25)] if triton_backend.interpreting() else []
_GPU = [("triton", "cuda", 30_000, 60), ("cuda", "cuda", 30_000, 60)] if torch.cuda.is_available() else []
_RUNS = [("python", "cpu", 30_000, 60), ("torch", "cpu", 30_000, 60), ("openmp", "cpu", 30_000, 60),
         *_CPU_TRITON, *_GPU]


@st.composite
def _inputs(draw: st.DrawFn, max_elements: int, dtypes: tuple[torch.dtype, ...]) -> tuple[torch.Tensor, int]:
    ndim = draw(st.integers(1, 3))
    shape: list[int] = []
    for _ in range(ndim):  # each size 0..300, the product within the budget
        rest = math.prod(n for n in shape if n) or 1
        shape.append(draw(st.integers(0, max(1, min(300, max_elements // rest)))))
    dim = draw(st.integers(-ndim, ndim - 1))
    dtype = draw(st.sampled_from(dtypes))
    seed = draw(st.integers(0, 2**31 - 1))
    scale = draw(st.sampled_from([1.0, 10.0]))
    offset = draw(st.sampled_from([0.0, 1000.0, -1000.0]))  # exp(1000) overflows without the max
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(shape, generator=g) * scale + offset
    if draw(st.booleans()) and x.numel():  # an attention-like mask: some rows end up all -inf
        x = x.masked_fill(torch.rand(shape, generator=g) < draw(st.sampled_from([0.3, 0.9])), float("-inf"))
    return x.to(dtype), dim


@pytest.mark.parametrize(("plugin", "device", "max_elements", "examples"), _RUNS,
                         ids=[f"{p}-{d}" for p, d, *_ in _RUNS])
@pytest.mark.filterwarnings("ignore::RuntimeWarning")  # the interpreter's numpy on -inf - -inf
def test_softmax_properties(plugin, device, max_elements, examples):
    impl = registry.impl("softmax", plugin)
    if not registry.availability(impl) or device not in impl.devices():
        pytest.skip(f"softmax/{plugin} cannot run on {device} here")
    op = registry.op("softmax")

    @settings(max_examples=examples, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(_inputs(max_elements, tuple(impl.dtypes[device])))
    def check(inputs: tuple[torch.Tensor, int]) -> None:
        x, dim = inputs
        x = x.to(device)
        call = op.check(x, dim)
        before = x.clone()
        out = impl.run(call, impl.config())
        ref = op.reference(call)
        assert out.shape == x.shape and out.dtype == x.dtype and out.device == x.device
        where = f"{call.describe()} on {device} ({dtype_name(x.dtype)})"
        mismatch = check_close(out, ref, op.tolerance(call))
        assert mismatch is None, f"{where}: {mismatch}"
        assert torch.equal(x.nan_to_num(), before.nan_to_num()), f"{where}: x was modified"
        if x.numel():
            # rows of only -inf are NaN (as in torch); every other row sums to 1, up to the
            # rounding of each output to the dtype
            sums = out.double().sum(call.params["dim"])
            valid = ~ref.isnan().any(call.params["dim"])
            assert torch.allclose(sums[valid], torch.ones_like(sums[valid]),
                                  rtol=0, atol=2 * op.tolerance(call).rtol + 1e-6), where

    check()
