"""FP8 attention's Triton kernel compiles for sm_90 through Triton's compiler, no GPU needed, in the specializations
its calls make (tests/triton_compile_scan.py's ATTENTION_FP8_CASES): float8_e4m3fn and float8_e5m2, P·V in FP8 and
with P in float16, q, k, Vᵀ and o through TMA descriptors and through pointers, GQA, causal, float16 out, head dims
16 to 256. Triton's interpreter runs the kernel on the CPU but never compiles it (nor checks that Hopper's 8-bit
products get their operands K-major)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

triton = pytest.importorskip("triton")
PTXAS = Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "ptxas"
pytestmark = pytest.mark.skipif(not PTXAS.exists(), reason="Triton's bundled ptxas is missing: it compiles for sm_90")


def test_fp8_attention_compiles_for_sm90():
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    done = subprocess.run([sys.executable, str(Path(__file__).with_name("triton_compile_scan.py")), "attention_fp8"],
                          capture_output=True, text=True, env=env, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    compiled = json.loads(done.stdout.strip().splitlines()[-1])
    assert len(compiled) == 9, sorted(compiled)  # every case of ATTENTION_FP8_CASES
    failed = {name: lines for name, lines in compiled.items()
              if not lines or not all(line.startswith("ok ") for line in lines)}
    assert not failed, "\n".join(f"{name}: {lines}" for name, lines in failed.items())
