"""The GEMM family's Triton kernels compile for sm_90 through Triton's compiler, no GPU needed, in each
specialization its calls make (tests/triton_compile_scan.py's GEMM_CASES: operand layouts, batch, TMA or plain
stores of C, warp specialization, TF32, FP8 with row scales, the tiled kernel, linear's activations in the epilogue),
and the elementwise passes of linear's activations beside it.

Triton's interpreter, which runs them on the CPU, executes Python and never compiles: a kernel it runs can still
fail to compile (a helper whose constexpr branches returned tensors of different shapes did)."""

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


def test_gemm_kernels_compile_for_sm90():
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    done = subprocess.run([sys.executable, str(Path(__file__).with_name("triton_compile_scan.py")), "gemm"],
                          capture_output=True, text=True, env=env, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    compiled = json.loads(done.stdout.strip().splitlines()[-1])
    assert len(compiled) == 15, sorted(compiled)  # every case of GEMM_CASES, and linear's 5 activation passes
    failed = {name: lines for name, lines in compiled.items()
              if not lines or not all(line.startswith("ok ") for line in lines)}
    assert not failed, "\n".join(f"{name}: {lines}" for name, lines in failed.items())
