"""The openmp GEMM core (plugins/_gemm/gemm_openmp.h) built for AVX-512 against its portable build: the B panels
of linear's transposed weight are packed by 16 × 16 AVX-512 transposes in one and element by element in the other,
and the products must come out bit for bit the same."""

from __future__ import annotations

import pytest
import torch

from kernelzoo.backends.openmp import avx512
from kernelzoo.registry import registry


@pytest.mark.parametrize(("m", "k", "n"), [(67, 300, 45), (5, 16, 16), (33, 17, 70)])
def test_portable_build_packs_the_same_panels(m, k, n, monkeypatch):
    impl = registry.impl("linear", "openmp")
    if not registry.availability(impl):
        pytest.skip(registry.availability(impl).reason)
    if not avx512():
        pytest.skip("no AVX-512 on this CPU: both builds are the portable loops")
    g = torch.Generator().manual_seed(0)
    x, w, b = torch.randn(m, k, generator=g), torch.randn(n, k, generator=g), torch.randn(n, generator=g)
    call = registry.op("linear").check(x, w, b)
    fast = impl.run(call, impl.config())
    build = impl.library
    monkeypatch.setattr(impl, "library", lambda build=build, **defines: build(**defines, KZ_PORTABLE=1))
    portable = impl.run(call, impl.config())
    assert torch.equal(fast, portable)
    torch.testing.assert_close(fast, torch.nn.functional.linear(x, w, b), rtol=1e-4, atol=1e-4)
