"""Every ``.cu`` of every cuda plugin compiles through NVRTC for sm_80 and sm_90, for each
dtype, with the default config and with the first value of every config entry, and for sm_90 with
each of its tuning seeds (the configs a search tries first). No GPU needed."""

from __future__ import annotations

import pytest

from kernelzoo.backends import cuda
from kernelzoo.registry import dtype_name, registry

ok, why = cuda.compile_available()
pytestmark = pytest.mark.skipif(not ok, reason=f"NVRTC not found: {why}")


def _params():
    for impl in registry.load():
        if isinstance(impl, cuda.CudaImplementation):
            first = impl.config({k: v[0] for k, v in impl.config_space.items()})
            for arch in ("sm_80", "sm_90"):
                for dtype in impl.dtypes["cuda"]:
                    configs = [("default", impl.config()), ("first", first)]
                    if arch == "sm_90":
                        configs += [(f"seed{i}", impl.config(seed)) for i, seed in enumerate(impl.tuning_seeds)]
                    for label, config in configs:
                        yield pytest.param(impl, dtype, config, arch,
                                           id=f"{impl.op}-{dtype_name(dtype)}-{arch}-{label}")


@pytest.mark.parametrize(("impl", "dtype", "config", "arch"), list(_params()))
def test_cuda_source_compiles(impl, dtype, config, arch):
    cubin = impl.compile(dtype, config, arch)
    assert cubin[:4] == b"\x7fELF"
