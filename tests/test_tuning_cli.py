"""`kernelzoo tune`, `show` and `tune --pending` end to end, in new processes as a user runs them."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import time

import pytest
import torch
from tuning_helpers import kernelzoo_cli, planted_toys, python, reset_lookup, temporary_db

import kernelzoo
import kernelzoo.cli
import kernelzoo.commands.tuning
from kernelzoo.db.records import missed_keys, save_device_ceilings, winners
from kernelzoo.db.store import forget_stores, open_store, sqlite_path
from kernelzoo.fingerprint import cpu_fingerprint
from kernelzoo.registry import registry
from kernelzoo.tuner.tune import default_dtypes

FAST = ("--device", "cpu", "--dtype", "float32", "--budget-ms", "10", "--quiet")
EXPLAIN = """
import json, torch, kernelzoo
x = torch.randn({shape})
choice = kernelzoo.explain("{op}", x)
assert torch.allclose(kernelzoo.ops.{op}(x), torch.{op}(x, -1) if "{op}" == "softmax" else torch.{op}(x))
print(json.dumps({{"plugin": choice.plugin, "reason": choice.reason}}))
"""


@pytest.fixture
def tmp_db(tmp_path, monkeypatch):
    """A new SQLite database, the default (KERNELZOO_DB) for this test; its URL."""
    with temporary_db(tmp_path, monkeypatch) as url:
        # planted ceilings: the tuner then needs no calibration run (~1 s per database)
        save_device_ceilings(open_store(url), cpu_fingerprint(), {"bandwidth_gbs": 10.0, "tflops": {"float32": 0.1}})
        yield url


def _check(done: subprocess.CompletedProcess) -> str:
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_tune_prints_the_table_show_lists_the_winner_and_a_new_process_runs_it(tmp_db):
    op = "softmax" if "softmax" in registry.load().ops else "relu"
    out = _check(kernelzoo_cli("tune", "--op", op, "--trials", "20", "--shape", "64x256", *FAST, "-v", "--db", tmp_db))
    assert "plugin" in out and "vs torch" in out and "% floor" in out and "winner: " in out
    shown = json.loads(_check(kernelzoo_cli("show", "--op", op, "--json", "--db", tmp_db)))
    (winner,) = shown
    assert {"op", "plugin", "config", "device", "dtype", "bucket", "time_ms"} <= set(winner)
    assert f"winner: {winner['plugin']}" in out
    ran = json.loads(_check(python(EXPLAIN.format(op=op, shape="64, 256"), env={"KERNELZOO_DB": tmp_db})))
    assert ran["plugin"] == winner["plugin"]
    assert ran["reason"].startswith("tuned (exact bucket")


def test_two_tuners_writing_one_sqlite_file_lose_no_winner(tmp_db):
    # at the same time, both tune two shapes (two shared studies) and one shape of their own
    args = [[sys.executable, "-m", "kernelzoo.cli", "tune", "--op", "relu", "--plugin", "torch", "--shape", "128x128",
             "--shape", "96x96", "--shape", own, "--trials", "3", *FAST, "--db", tmp_db] for own in ("64x64", "32x32")]
    procs = [subprocess.Popen(a, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for a in args]
    for p in procs:
        _, err = p.communicate(timeout=300)
        assert p.returncode == 0, err
    tuned = sorted(w.shape for w in winners(open_store(tmp_db), op="relu"))
    assert tuned == ["128x128", "32x32", "64x64", "96x96"]


def test_tune_pending_tunes_exactly_the_keys_programs_missed(tmp_db):
    x = torch.randn(48, 40)
    assert kernelzoo.explain("relu", x).reason == "default order"  # a miss, recorded in the database
    reset_lookup()  # writes it, and makes this process new
    out = _check(kernelzoo_cli("tune", "--pending", "--plugin", "torch", "--plugin", "python", *FAST, "--db", tmp_db))
    assert "relu float32 48x40" in out
    assert kernelzoo.explain("relu", x).reason == "tuned (exact bucket n=2^11)"
    assert missed_keys(open_store(tmp_db), cpu_fingerprint().hash) == []


def test_default_dtypes_follow_the_op_on_each_device():
    """attention tunes the half floats on a GPU unless asked; an op without tune_dtypes tunes all its plugins take."""
    assert default_dtypes("attention", ["triton", "cuda", "torch"], "cuda") == ["float16", "bfloat16"]
    assert default_dtypes("attention", ["openmp", "torch"], "cpu") == ["float32"]
    assert default_dtypes("softmax", ["triton", "torch"], "cuda") == ["float32", "float16", "bfloat16"]


def _trials_in(path) -> int:
    """The trials stored in the SQLite file at ``path`` (0 before its tables exist), read and closed at once."""
    with contextlib.closing(sqlite3.connect(f"file:{path}?mode=ro", uri=True)) as db:
        try:
            return db.execute("SELECT count(*) FROM kz_trials").fetchone()[0]
        except sqlite3.OperationalError:
            return 0


def test_a_terminated_tune_leaves_its_trials_in_the_database_file(tmp_db, tmp_path, monkeypatch):
    """`timeout ... kernelzoo tune` ends the run by SIGTERM: it unwinds as Ctrl-C does and closes the database, so
    SQLite folds its write-ahead log into the file, and a copy of the file alone holds the trials run so far.
    Killed outright, the run left them in the -wal file beside it."""
    path = sqlite_path(tmp_db)
    forget_stores()  # the fixture's connection closed: the tuner's is the last one, whose close folds the log
    with planted_toys(monkeypatch):
        # kz_toy/planted's configs in order: ok, slow, wrong, abort, segv, then one that hangs past the signal
        run = subprocess.Popen([sys.executable, "-m", "kernelzoo.cli", "tune", "--op", "kz_toy", "--plugin",
                                "planted", "--timeout", "60", *FAST], stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True, env=os.environ.copy())
        deadline, stored = time.monotonic() + 120, 0
        while stored < 3:
            assert run.poll() is None and time.monotonic() < deadline, run.communicate()
            time.sleep(0.1)
            stored = _trials_in(path)
        run.send_signal(signal.SIGTERM)
        _, err = run.communicate(timeout=60)
    assert run.returncode == 128 + signal.SIGTERM, err
    copy = tmp_path / "copied.sqlite"
    shutil.copyfile(path, copy)  # the file alone, as `cp tuning.sqlite` copies it
    assert _trials_in(copy) >= stored


@pytest.mark.parametrize(("signum", "status"), [(signal.SIGTERM, 143), (signal.SIGINT, 130)])
def test_an_interrupt_lost_in_a_finally_block_still_ends_the_command_as_interrupted(monkeypatch, signum, status):
    """An interrupt that lands in Optuna's bookkeeping of a trial comes out of its trial loop as the
    UnboundLocalError of a finally block (seen once in CI); the command still ends as interrupted."""
    def interrupted_in_bookkeeping(args) -> int:
        try:
            os.kill(os.getpid(), signum)
            time.sleep(30)  # the handler raises before this ends
        finally:
            raise UnboundLocalError("cannot access local variable 'updated_state'")  # what Optuna's loop raised

    monkeypatch.setattr(kernelzoo.commands.tuning, "run_tune", interrupted_in_bookkeeping)
    assert kernelzoo.cli.main(["tune", "--op", "relu"]) == status
