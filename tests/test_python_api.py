"""Tuning from Python: ``kernelzoo.record()`` captures the keys a block calls, ``kernelzoo.tune(calls=rec)`` tunes
exactly those (and a new process then runs the winners); ``kernelzoo.tune(op=...)`` tunes an op's shapes; the report
serialises to JSON; names are checked with a suggestion; ``import kernelzoo`` alone exposes kernelzoo.nn."""

from __future__ import annotations

import json

import optuna
import pytest
import torch
from tuning_helpers import python, reset_lookup, temporary_db

import kernelzoo
from kernelzoo.db.records import save_device_ceilings, winners
from kernelzoo.db.store import open_store
from kernelzoo.errors import UnknownError
from kernelzoo.fingerprint import cpu_fingerprint
from kernelzoo.tuner.search import optuna_storage

FAST = {"devices": "cpu", "trials": 2, "measure_ms": 5}


@pytest.fixture
def tmp_db(tmp_path, monkeypatch):
    with temporary_db(tmp_path, monkeypatch) as url:
        save_device_ceilings(open_store(url), cpu_fingerprint(), {"bandwidth_gbs": 10.0, "tflops": {"float32": 0.1}})
        yield url


def test_record_then_tune_tunes_exactly_the_recorded_keys(tmp_db):
    x, b = torch.randn(48, 40), torch.randn(40)
    with kernelzoo.record() as rec:
        for _ in range(3):
            kernelzoo.ops.relu(x)
        kernelzoo.ops.add(x, b)
    kernelzoo.ops.softmax(x, dim=-1)  # after the block: not recorded
    assert [(k.op, k.dtype, k.shape, k.device) for k in rec] == [("relu", "float32", "48x40", "cpu"),
                                                                  ("add", "float32", "48x40+40", "cpu")]
    report = kernelzoo.tune(calls=rec, plugins=["torch", "python"], **FAST)
    assert report.ok, report.summary()
    assert sorted((r.op, r.shape_text) for r in report.keys) == [("add", "48x40+40"), ("relu", "48x40")]
    assert sorted({w.op for w in winners(open_store(tmp_db))}) == ["add", "relu"]
    data = json.loads(report.to_json())
    assert data["ok"] and {k["winner"] for k in data["keys"]} <= {"torch", "python"}
    assert all(p["time_ms"] > 0 for k in data["keys"] for p in k["plugins"])
    assert "relu float32 48x40" in str(report)
    reset_lookup()
    assert kernelzoo.explain("relu", x).reason.startswith("tuned (exact bucket")
    # the dashboard's view: readable study names, the key's winner as a study attribute
    studies = optuna.study.get_all_study_summaries(optuna_storage(tmp_db), include_best_trial=False)
    relu = [s for s in studies if s.study_name.startswith("kernelzoo: relu · torch · float32 · ")]
    assert relu and relu[0].user_attrs["key_winner"] in ("torch", "python"), [s.study_name for s in studies]


def test_tune_an_op_at_given_shapes_and_dtypes(tmp_db):
    report = kernelzoo.tune("relu", shapes=["64x64", "32x32"], dtypes=["float32"], plugins=["torch"], **FAST)
    assert report.ok and sorted(r.shape_text for r in report.keys) == ["32x32", "64x64"]
    assert {r.dtype for r in report.keys} == {"float32"}
    assert report.to_dict()["keys"][0]["plugins"][0]["config"] == {}


def test_tune_checks_names_before_any_work(tmp_db):
    with pytest.raises(UnknownError, match="did you mean 'relu'"):
        kernelzoo.tune("rleu")
    with pytest.raises(UnknownError, match="did you mean 'openmp'"):
        kernelzoo.tune("relu", plugins=["opnemp"])


def test_a_time_budget_leaves_keys_untouched_and_says_so(tmp_db):
    report = kernelzoo.tune("relu", shapes=["64x64", "32x32"], dtypes=["float32"], plugins=["torch"],
                            budget=1e-9, **FAST)
    assert not report.ok and report.keys == []
    assert report.not_started == ["relu float32 64x64 on cpu", "relu float32 32x32 on cpu"]
    assert "the time budget left 2 key(s) untouched" in report.summary()


def test_import_kernelzoo_alone_exposes_nn_tune_and_record():
    done = python("import kernelzoo; print(kernelzoo.nn.MultiheadAttention.__name__, kernelzoo.tune.__name__, "
                  "kernelzoo.record.__name__)")
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["MultiheadAttention", "tune", "record"]
