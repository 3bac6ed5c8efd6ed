"""Runs tests/triton_compile_scan.py in a process of its own, without TRITON_INTERPRET (the interpreter never
compiles), for the tests that compile Triton kernels for sm_90 with no GPU."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

triton = pytest.importorskip("triton")
PTXAS = Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "ptxas"
needs_ptxas = pytest.mark.skipif(not PTXAS.exists(), reason="Triton's bundled ptxas is missing: it compiles for sm_90")


def scan(mode: str, timeout: float = 1200) -> dict[str, list[str]]:
    """triton_compile_scan.py's answer for ``mode``: {name: ["ok kernel" | "FAIL kernel: why" | "host: why", ...]}."""
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    done = subprocess.run([sys.executable, str(Path(__file__).with_name("triton_compile_scan.py")), mode],
                          capture_output=True, text=True, env=env, timeout=timeout)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def failures(compiled: dict[str, list[str]]) -> str:
    """The names whose launches did not all compile, with their lines (empty: every one did)."""
    return "\n".join(f"{name}: {lines}" for name, lines in compiled.items()
                     if not lines or not all(line.startswith("ok ") for line in lines))
