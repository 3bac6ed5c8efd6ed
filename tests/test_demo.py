"""``kernelzoo demo``, the README's first command: every available plugin of an op checked against the float64
reference and timed against torch. In-place ops (the optimizer updates, copy_) overwrite their inputs, so each
plugin must start from the originals; the foreach update returns tuples of tuples; copy_'s reference is flat."""

from __future__ import annotations

import os
import subprocess
import sys

OPS = ["adam_update_", "adam_update_foreach_", "sgd_update_", "copy_", "relu", "layer_norm", "attention"]


def test_demo_checks_every_plugin_of_in_place_and_tuple_ops():
    # a user's CPU process: no Triton interpreter (the tests' conftest turns it on in this process)
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    done = subprocess.run([sys.executable, "-m", "kernelzoo.cli", "demo", "--device", "cpu",
                           *(a for op in OPS for a in ("--op", op))], capture_output=True, text=True, env=env,
                          timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    out = done.stdout
    for op in OPS:
        assert f"\n{op}(" in out, op
    rows = [line.split() for line in out.splitlines() if line.split()[:1] in (["openmp"], ["python"], ["torch"])]
    assert len(rows) >= 3 * len(OPS) - 1, out  # attention's python and openmp and torch, and every other op's
    assert all(row[2] == "ok" for row in rows), out  # not WRONG, not FAILED
