"""Every triton plugin's kernels compile for sm_90 through Triton's compiler, no GPU needed: those its default
config launches on the first small conformance cases of each GPU dtype (tests/triton_compile_scan.py). Triton's
interpreter, which runs the plugins on the CPU, never compiles, so a kernel it runs can still fail on a GPU."""

from __future__ import annotations

import pytest
from compile_scan import needs_ptxas
from compile_scan import scan as run_scan

from kernelzoo.backends.triton import TritonImplementation
from kernelzoo.registry import dtype_name, registry

pytestmark = needs_ptxas


@pytest.fixture(scope="module")
def scan() -> dict[str, list[str]]:
    return run_scan("plugins")


def _keys() -> list[str]:
    return [f"{impl.op}/{dtype_name(dtype)}" for impl in registry.load() if isinstance(impl, TritonImplementation)
            for dtype in impl.dtypes.get("cuda", ())]


@pytest.mark.parametrize("key", _keys())
def test_triton_plugin_kernels_compile_for_sm90(scan, key):
    found = scan[key]
    assert found and all(line.startswith("ok ") for line in found), "\n".join(found)
