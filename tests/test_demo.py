"""``kernelzoo demo``, the README's first command: every available plugin of an op checked against the float64
reference (its error as a share of the op's tolerance) and timed against torch. In-place ops (the optimizer updates,
copy_) overwrite their inputs, so each plugin must start from the originals; the foreach update returns tuples of
tuples; copy_'s reference is flat."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import torch

from kernelzoo.commands.demo import TOUR, tolerance_used
from kernelzoo.registry import registry

OPS = ["adam_update_", "adam_update_foreach_", "sgd_update_", "copy_", "relu", "layer_norm", "attention"]


def _demo(*args: str) -> subprocess.CompletedProcess:
    # a user's CPU process: no Triton interpreter (the tests' conftest turns it on in this process)
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    return subprocess.run([sys.executable, "-m", "kernelzoo.cli", "demo", "--device", "cpu", *args],
                          capture_output=True, text=True, env=env, timeout=600)


def test_demo_checks_every_plugin_of_in_place_and_tuple_ops():
    done = _demo("--json", *(a for op in OPS for a in ("--op", op)))
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    rows = json.loads(done.stdout)
    assert {r["op"] for r in rows} == set(OPS)
    assert len(rows) >= 3 * len(OPS) - 1  # attention's python and openmp and torch, and every other op's
    assert all(r["check"] == "ok" for r in rows), [r for r in rows if r["check"] != "ok"]  # not WRONG, not FAILED
    # within tolerance: at most all of it, except for attention, judged against the math in the input precision
    assert all(0 <= r["error"] <= 1 for r in rows if r["op"] != "attention"), rows
    assert all(r["ms"] > 0 for r in rows)


def test_demo_by_default_says_what_it_does_and_runs_a_short_tour():
    done = _demo()
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    header = done.stderr.splitlines()[0]
    assert header.startswith(f"kernelzoo demo: {len(TOUR)} ops") and " s; --full runs all " in header
    assert "about " in header
    assert f"[{len(TOUR)}/{len(TOUR)}" in done.stderr  # progress, one line per op off a terminal
    assert "error / allowed" in done.stdout and "every output within tolerance" in done.stdout
    for op in TOUR:
        assert f"\n{op}(" in done.stdout, op


def test_the_error_is_a_share_of_the_ops_tolerance():
    spec = registry.op("softmax")
    call = spec.example((4, 8), torch.float32, "cpu", torch.Generator().manual_seed(0))
    ref = spec.reference(call)
    tol = spec.tolerance(call)
    exact = ref.to(torch.float32)
    assert tolerance_used(spec, call, ref.clone(), ref) == 0
    off = ref + (tol.atol + tol.rtol * ref.abs()) * 0.5  # half of what is allowed, everywhere
    assert abs(tolerance_used(spec, call, off, ref) - 0.5) < 1e-6
    assert tolerance_used(spec, call, exact, ref) < 1
