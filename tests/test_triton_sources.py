"""Every triton plugin's kernels compile for sm_90 through Triton's compiler, no GPU needed: those its default
config launches on the first small conformance cases of each GPU dtype (tests/triton_compile_scan.py). Triton's
interpreter, which runs the plugins on the CPU, never compiles, so a kernel it runs can still fail on a GPU."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from kernelzoo.backends.triton import TritonImplementation
from kernelzoo.registry import dtype_name, registry

triton = pytest.importorskip("triton")
PTXAS = Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "ptxas"
pytestmark = pytest.mark.skipif(not PTXAS.exists(), reason="Triton's bundled ptxas is missing: it compiles for sm_90")


@pytest.fixture(scope="module")
def scan() -> dict[str, list[str]]:
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    done = subprocess.run([sys.executable, str(Path(__file__).with_name("triton_compile_scan.py")), "plugins"],
                          capture_output=True, text=True, env=env, timeout=1200)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def _keys() -> list[str]:
    return [f"{impl.op}/{dtype_name(dtype)}" for impl in registry.load() if isinstance(impl, TritonImplementation)
            for dtype in impl.dtypes.get("cuda", ())]


@pytest.mark.parametrize("key", _keys())
def test_triton_plugin_kernels_compile_for_sm90(scan, key):
    found = scan[key]
    assert found and all(line.startswith("ok ") for line in found), "\n".join(found)
