"""``kernelzoo tune --pending`` on the keys the training examples record in one short run each: every key is
rebuilt from its recorded keywords (layer_norm's normalized_shape, embedding_backward's num_weights, a
reduction's dim are derived from the shape by the op's example), tuned, and forgotten, with one progress line
per study and no traceback."""

from __future__ import annotations

import subprocess
import sys

import pytest
from tuning_helpers import ROOT, kernelzoo_cli, temporary_db

from kernelzoo.db.records import missed_keys, save_device_ceilings
from kernelzoo.db.store import forget_stores, open_store
from kernelzoo.fingerprint import cpu_fingerprint

EXAMPLES = ["mlp", "digits_cnn", "tiny_transformer"]


@pytest.fixture
def tmp_db(tmp_path, monkeypatch):
    with temporary_db(tmp_path, monkeypatch) as url:
        save_device_ceilings(open_store(url), cpu_fingerprint(), {"bandwidth_gbs": 10.0, "tflops": {"float32": 0.1}})
        yield url


def test_tune_pending_tunes_every_key_the_examples_record(tmp_db):
    for name in EXAMPLES:
        done = subprocess.run([sys.executable, str(ROOT / "examples" / f"{name}.py"), "--quick", "--device", "cpu"],
                              capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, done.stderr[-3000:]
    forget_stores()
    fp = cpu_fingerprint().hash
    recorded = missed_keys(open_store(tmp_db), fp)
    ops = {m.op for m in recorded}
    assert {"layer_norm", "layer_norm_backward", "embedding_backward", "max", "sum"} <= ops  # the keys that failed
    done = kernelzoo_cli("tune", "--pending", "--device", "cpu", "--plugin", "torch", "--trials", "1", "--budget-ms",
                         "2", timeout=900)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "Traceback" not in done.stderr and "Error" not in done.stderr, done.stderr[-3000:]
    assert f"{len(recorded)} key(s) with a verified winner, 0 without" in done.stdout
    # progress: one line per study, counted against the whole run, with the time left
    progress = [line for line in done.stderr.splitlines() if line.startswith("[")]
    assert len(progress) == len(recorded) and progress[-1].startswith(f"[{len(recorded)}/{len(recorded)}")
    forget_stores()
    assert missed_keys(open_store(tmp_db), fp) == []
