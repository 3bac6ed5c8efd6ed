"""The openmp plugins' own exp, erfc and tanh (plugins/_elementwise/vector_math.h): against float64 in
ulps over the whole float range, and the AVX-512 versions (built where the CPU has AVX-512) against the
portable loops (KZ_PORTABLE forces those), values and special cases alike."""

from __future__ import annotations

import pytest
import torch

from kernelzoo.backends.openmp import avx512
from kernelzoo.registry import registry

SPECIALS = [float("inf"), float("-inf"), float("nan"), 0.0, -0.0, 0.625, -0.625, 9.02, -20.0, 88.72, 88.73,
            -87.5, -103.9, -104.5, 1e-30, -1e-38]


def _points() -> torch.Tensor:
    g = torch.Generator().manual_seed(0)
    return torch.cat([torch.linspace(-110.0, 95.0, 200_003), torch.randn(100_000, generator=g),
                      torch.randn(10_000, generator=g) * 1e-3, torch.tensor(SPECIALS)])


def _run(op: str, x: torch.Tensor) -> torch.Tensor:
    impl = registry.impl(op, "openmp")
    return impl.run(registry.op(op).check(x), impl.config())


@pytest.fixture(params=["exp", "tanh"])
def op(request) -> str:
    availability = registry.availability(registry.impl(request.param, "openmp"))
    if not availability:
        pytest.skip(availability.reason)
    return request.param


def test_within_two_ulps_of_float64_and_libm_at_the_edges(op):
    x = _points()
    got, want = _run(op, x), getattr(torch, op)(x.double())
    normal = torch.isfinite(want) & (want.abs() > 1.2e-38) & (want.abs() < 3.4e38)
    ulps = (got.double() - want).abs()[normal] / (want[normal].float().abs().double() * 2.0**-23)
    assert float(ulps.max()) <= 2.0
    subnormal = want.abs() <= 1.2e-38  # exp's results below 2^-126: within one subnormal step
    assert float((got.double() - want).abs()[subnormal].max()) <= 2.0**-149
    tail = torch.tensor(SPECIALS)
    libm = getattr(torch, op)(tail)
    assert torch.equal(torch.isnan(_run(op, tail)), torch.isnan(libm))
    same = ~torch.isnan(libm)
    assert torch.equal(_run(op, tail)[same].signbit(), libm[same].signbit())  # tanh(-0) = -0, exp(-inf) = +0
    assert torch.equal(torch.isinf(_run(op, tail)), torch.isinf(libm))


def test_portable_build_gives_the_avx512_values(op, monkeypatch):
    if not avx512():
        pytest.skip("no AVX-512 on this CPU: both builds are the portable loops")
    x = _points()
    fast = _run(op, x)
    impl = registry.impl(op, "openmp")
    build = impl.library
    monkeypatch.setattr(impl, "library", lambda build=build, **defines: build(**defines, KZ_PORTABLE=1))
    portable = _run(op, x)
    assert torch.equal(torch.isnan(fast), torch.isnan(portable))
    # subnormal results may differ by one step: the portable exp applies 2^k in two halves, rounding twice
    torch.testing.assert_close(fast, portable, rtol=3e-7, atol=2.0**-149, equal_nan=True)


def test_gelu_backward_s_avx512_loop_gives_the_portable_values(monkeypatch):
    """gelu_backward's exact formula runs kz_erfcf16 and kz_expf16 on whole vectors of a contiguous call (the
    last n % 16 elements, and strided calls, run the scalar code): the same values as the portable build, specials
    included, and the same errors against float64."""
    impl = registry.impl("gelu_backward", "openmp")
    if not registry.availability(impl):
        pytest.skip(registry.availability(impl).reason)
    if not avx512():
        pytest.skip("no AVX-512 on this CPU: both builds are the portable loops")
    spec = registry.op("gelu_backward")
    x = torch.cat([torch.linspace(-40.0, 40.0, 200_003), torch.tensor(SPECIALS)])
    grad = torch.randn(x.shape, generator=torch.Generator().manual_seed(1))
    call = spec.check(grad, x, approximate="none")
    fast = impl.run(call, impl.config())
    build = impl.library
    monkeypatch.setattr(impl, "library", lambda build=build, **defines: build(**defines, KZ_PORTABLE=1))
    portable = impl.run(call, impl.config())
    assert torch.equal(torch.isnan(fast), torch.isnan(portable))
    # a few ulps of the two terms apart (the exps apply 2^k differently, gcc contracts the scalar code's products its
    # own way); near gelu's root x = -0.75 the terms, about 0.2, cancel, so the bound is absolute there
    torch.testing.assert_close(fast, portable, rtol=2e-6, atol=1e-7, equal_nan=True)
    want = spec.reference(call)
    finite = torch.isfinite(want)
    error = {name: float((got.double() - want)[finite].abs().max())
             for name, got in (("fast", fast), ("portable", portable))}
    assert error["fast"] <= 1.5 * error["portable"], error
