"""Tuning as a job shared by several workers (claims, leases, budgets) and one winner on every rank (snapshots).

The job tests run on SQLite with several processes, and on a real PostgreSQL server when one is running
(``bash -c '. .ci/postgres.sh && python -m pytest tests/test_fleet.py'``); relu with the openmp and python
plugins at small shapes keeps them short.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import optuna
import pytest
import sqlalchemy as sa
import torch
from optuna.distributions import CategoricalDistribution
from tuning_helpers import kernelzoo_cli, python, reset_lookup

from kernelzoo.db.records import Winner, save_device_ceilings, save_winner, winners
from kernelzoo.db.snapshot import content_hash, load_snapshot, snapshot_data
from kernelzoo.db.store import forget_stores, open_store
from kernelzoo.errors import ArgumentError
from kernelzoo.fingerprint import cpu_fingerprint
from kernelzoo.registry import registry
from kernelzoo.tuner import jobs
from kernelzoo.tuner.fleet import visible_gpus
from kernelzoo.tuner.jobs import parse_duration
from kernelzoo.tuner.search import Target, TuneOptions, optuna_storage, search
from tests.postgres import postgres_url  # noqa: F401 - a fixture

RELU = ("--op", "relu", "--plugin", "openmp", "--plugin", "python", "--device", "cpu", "--dtype", "float32",
        "--quiet", "--trials", "2")


@pytest.fixture(params=["sqlite", "postgresql"])
def db_url(request, tmp_path, monkeypatch):
    """An empty tuning database, SQLite or PostgreSQL, with planted CPU ceilings (no calibration run)."""
    monkeypatch.setenv("KERNELZOO_CACHE_DIR", str(tmp_path / "cache"))
    url = f"sqlite:///{tmp_path / 'tuning.sqlite'}" if request.param == "sqlite" else \
        request.getfixturevalue("postgres_url")
    save_device_ceilings(open_store(url), cpu_fingerprint(), {"bandwidth_gbs": 10.0, "tflops": {"float32": 0.1}})
    yield url
    forget_stores()


def _rows(url: str, query: str) -> list[dict]:
    engine = sa.create_engine(url)
    try:
        with engine.connect() as conn:
            return [dict(r._mapping) for r in conn.execute(sa.text(query))]
    finally:
        engine.dispose()


def _tasks(url: str) -> list[dict]:
    return _rows(url, "SELECT task_id, key, plugin, state, owner, attempts FROM kz_tasks ORDER BY task_id")


def _trial_counts(url: str) -> Counter:
    """Measurements per (study, config): more than 1 is a trial done twice."""
    return Counter((r["study_name"], json.dumps(json.loads(r["config"]) if isinstance(r["config"], str)
                                                 else r["config"], sort_keys=True))
                   for r in _rows(url, "SELECT study_name, config FROM kz_trials"))


def _tune(url: str, *args: str, timeout: float = 400) -> subprocess.CompletedProcess:
    done = kernelzoo_cli("tune", *RELU, "--db", url, *args, timeout=timeout)
    assert done.returncode == 0, done.stdout + done.stderr
    return done


def _status(url: str) -> dict:
    done = kernelzoo_cli("tune", "--status", "--json", "--db", url, timeout=120)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_three_workers_tune_one_job_each_task_once(db_url):
    out = _tune(db_url, "--shape", "64x64", "--shape", "128x128", "--shape", "256x256", "--budget-ms", "5",
                "--workers", "3").stdout
    assert "3 key(s) done, 0 claimed, 0 left" in out
    tasks = _tasks(db_url)
    assert len(tasks) == 6 and {t["state"] for t in tasks} == {"done"} and {t["attempts"] for t in tasks} == {1}
    stored = winners(open_store(db_url), op="relu")
    assert len(stored) == 6 and len({(w.plugin, w.bucket) for w in stored}) == 6
    assert all(w.code_files == registry.impl("relu", w.plugin).code_files for w in stored), "the files measured"
    counts = _trial_counts(db_url)
    assert set(counts.values()) == {1}  # no config measured twice
    per_study = Counter(study.split(" · ")[1] for study, _ in counts)  # 'kernelzoo: relu · openmp · ...'
    assert per_study == {"openmp": 6, "python": 3}  # 2 configs x 3 keys, 1 config x 3 keys
    status = _status(db_url)
    assert status["keys"] == {"done": 3, "claimed": 0, "left": 0} and status["eta_s"] == 0.0


def test_a_worker_killed_mid_task_loses_its_claim_to_another(db_url):
    proc = subprocess.Popen([sys.executable, "-m", "kernelzoo.cli", "tune", *RELU, "--db", db_url, "--shape",
                             "64x64", "--shape", "128x128", "--budget-ms", "400", "--workers", "2", "--lease", "3"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        victim = None
        deadline = time.monotonic() + 240
        while victim is None and time.monotonic() < deadline and proc.poll() is None:
            with contextlib.suppress(sa.exc.SQLAlchemyError):  # the job tables are not there yet
                victim = next((t for t in _tasks(db_url) if t["state"] == "claimed"), None)
            time.sleep(0.1)
        assert victim is not None, "no task was claimed"
        running = jobs.status(open_store(db_url))  # what `tune --status` shows of a running job
        assert running.counts()["claimed"] >= 1 and victim["owner"] in running.workers
        os.kill(int(victim["owner"].split(":")[-2]), signal.SIGKILL)
        out, err = proc.communicate(timeout=400)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, out + err
    assert "1 worker(s) ended with an error" in err and "taken over from a lost worker" in out
    tasks = {t["task_id"]: t for t in _tasks(db_url)}
    assert {t["state"] for t in tasks.values()} == {"done"}
    taken = tasks[victim["task_id"]]
    assert taken["attempts"] == 2 and taken["owner"] != victim["owner"]
    assert len(winners(open_store(db_url), op="relu")) == 4
    assert set(_trial_counts(db_url).values()) == {1}  # the trial the kill cut short was measured once, later


def test_a_budget_stops_the_job_and_a_rerun_resumes_it(db_url):
    shapes = [a for s in ("1024x2048", "2048x2048", "2048x4096", "4096x4096", "4096x8192") for a in ("--shape", s)]
    started = time.monotonic()
    # 5 keys x 3 trials, each timing a relu of 2^21 to 2^25 elements up to 500 times or for 1 s, and checking it
    # against the float64 reference: more than the 6 s budget on any machine
    out = _tune(db_url, *shapes, "--budget-ms", "1000", "--budget", "6s").stdout
    assert time.monotonic() - started < 120
    assert "the budget ran out" in out
    status = _status(db_url)
    assert status["keys"]["left"] > 0 and status["keys"]["claimed"] == 0
    # finished keys are stored whole, the others not at all
    assert len(winners(open_store(db_url), op="relu")) == 2 * status["keys"]["done"]
    out = _tune(db_url, *shapes, "--budget-ms", "1000", "--workers", "1").stdout  # the same job, no budget
    assert "5 key(s) done, 0 claimed, 0 left" in out
    assert len(winners(open_store(db_url), op="relu")) == 10
    assert set(_trial_counts(db_url).values()) == {1}  # the rerun measured only what the first run had not


def test_a_key_ends_when_a_trial_comes_within_the_floor(tmp_path, monkeypatch):
    monkeypatch.setenv("KERNELZOO_CACHE_DIR", str(tmp_path / "cache"))
    url = f"sqlite:///{tmp_path / 'tuning.sqlite'}"
    # a floor far above any time measured here: every verified trial is within 10 % of it
    save_device_ceilings(open_store(url), cpu_fingerprint(), {"bandwidth_gbs": 1e-9, "tflops": {"float32": 1e-9}})
    out = _tune(url, "--shape", "64x64", "--budget-ms", "5", "--floor-within", "10").stdout
    assert "1 key(s) done" in out
    assert {t["plugin"]: t["state"] for t in _tasks(url)} == {"openmp": "done", "python": "skipped"}
    assert [w.plugin for w in winners(open_store(url), op="relu")] == ["openmp"]
    assert sum(_trial_counts(url).values()) == 1  # the second openmp config was not measured
    forget_stores()


def test_bad_fleet_arguments_are_refused_with_the_reason(tmp_path):
    url = f"sqlite:///{tmp_path / 'tuning.sqlite'}"
    done = kernelzoo_cli("tune", "--status", "--db", url, timeout=120)
    assert done.returncode == 2 and "no tuning job" in done.stderr
    done = kernelzoo_cli("tune", *RELU, "--db", url, "--budget", "soon", timeout=120)
    assert done.returncode == 2 and "--budget must be a positive duration" in done.stderr
    if not torch.cuda.is_available():
        done = kernelzoo_cli("tune", *RELU, "--db", url, "--devices", "0", timeout=120)
        assert done.returncode == 2 and "--devices needs a GPU" in done.stderr
    assert parse_duration("10m") == 600 and parse_duration("1.5h") == 5400 and parse_duration("90") == 90
    with pytest.raises(ArgumentError, match="positive duration"):
        parse_duration("-3s")


def _winner(plugin: str, ms: float) -> Winner:
    return Winner(op="relu", plugin=plugin, source_hash=registry.impl("relu", plugin).source_hash,
                  device=cpu_fingerprint(), dtype="float32", bucket=(12,), flags="", config={}, time_ms=ms,
                  spread=0.01, shape="64x64")


def test_claims_leases_and_a_key_stored_whole(tmp_path):
    """In one process: tasks are claimed per fingerprint, a lapsed lease passes the task on, and a key's winners
    are stored in the transaction that finishes its last task."""
    registry.load()
    store = open_store(f"sqlite:///{tmp_path / 'tuning.sqlite'}")
    job_id, name = jobs.open_job(store, {"what": "a test"})
    assert jobs.open_job(store, {"what": "a test"}) == (job_id, name)  # every host joins the same job
    key = jobs.Key("relu", "float32", (64, 64), {})
    assert jobs.add_tasks(store, job_id, "fp-a", [(key, ["python", "torch"])]) == 2
    assert jobs.add_tasks(store, job_id, "fp-a", [(key, ["python", "torch"])]) == 0
    jobs.add_tasks(store, job_id, "fp-b", [(key, ["python"])])
    first = jobs.claim(store, job_id, "fp-a", "w1", lease_s=60)
    second = jobs.claim(store, job_id, "fp-a", "w2", lease_s=0.2)
    assert (first.plugin, second.plugin) == ("python", "torch")
    assert jobs.claim(store, job_id, "fp-a", "w3", lease_s=60) is None  # both held; fp-b's is not ours
    time.sleep(0.3)  # w2's lease runs out without a renewal: w3 takes the task over
    taken = jobs.claim(store, job_id, "fp-a", "w3", lease_s=60)
    assert taken.task_id == second.task_id and taken.attempts == 2
    assert not jobs.renew(store, second, "w2", 60)
    done = jobs.finish(store, first, "w1", winner=_winner("python", 0.02))
    assert done.recorded and done.stored == () and winners(store, op="relu") == []  # torch not compared yet
    done = jobs.finish(store, taken, "w3", winner=_winner("torch", 0.01))
    assert sorted(w.plugin for w in done.stored) == ["python", "torch"]
    assert sorted(w.plugin for w in winners(store, op="relu")) == ["python", "torch"]
    assert not jobs.finish(store, second, "w2", winner=_winner("torch", 0.5)).recorded  # too late: w3's stands
    assert {w.plugin: w.time_ms for w in winners(store, op="relu")}["torch"] == 0.01
    status = jobs.status(store, name)
    assert status.counts() == {"done": 1, "claimed": 0, "left": 1} and status.taken_over == 1
    assert status.eta_s is not None and status.eta_s > 0  # one task left, at the pace of the two done
    forget_stores()


def test_devices_name_the_gpus_this_process_sees(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 4)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3,5,6,7")
    assert visible_gpus("0,2") == ["3", "6"] and visible_gpus("all") == ["3", "5", "6", "7"]
    for bad in ("4", "0,0", "one", ""):
        with pytest.raises(ArgumentError, match="--devices must be"):
            visible_gpus(bad)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU: one fleet worker per GPU")
def test_devices_all_tunes_one_job_with_a_worker_per_gpu(tmp_path, monkeypatch):
    monkeypatch.setenv("KERNELZOO_CACHE_DIR", str(tmp_path / "cache"))
    url = f"sqlite:///{tmp_path / 'tuning.sqlite'}"
    done = kernelzoo_cli("tune", "--op", "relu", "--plugin", "torch", "--plugin", "cuda", "--shape", "1024x1024",
                         "--shape", "4096x4096", "--dtype", "float32", "--trials", "3", "--quiet", "--devices", "all",
                         "--db", url, timeout=600)
    assert done.returncode == 0, done.stderr
    tasks = _tasks(url)
    assert len(tasks) == 4 and {t["state"] for t in tasks} == {"done"}
    assert len(winners(open_store(url), op="relu")) == 4 and set(_trial_counts(url).values()) == {1}
    forget_stores()


# --- one winner on every rank ---------------------------------------------------------------------------------

TIMES = {  # plugin -> [(config, ms, spread)]: openmp's two configs tie exactly, python is within noise of them
    "openmp": [({"threads": 1}, 0.010, 0.05), ({"threads": 2}, 0.010, 0.05)],
    "python": [({}, 0.0104, 0.05)],
    "torch": [({}, 0.020, 0.01)],
}


def _fill(url: str, order: int) -> None:
    """Store the trials of TIMES as studies, each in ``order`` (1 or -1), then each plugin's winner (plugins in
    that order too), as ``kernelzoo tune`` ends a key."""
    store = open_store(url)
    fp = cpu_fingerprint()
    x = torch.randn(64, 64)
    spec = registry.load().op("relu")
    for plugin, trials in list(TIMES.items())[::order]:
        impl = registry.impl("relu", plugin)
        space = impl.config_space
        target = Target(op="relu", plugin=plugin, device="cpu", dtype="float32", shape=(64, 64), params={},
                        fingerprint=fp, source_hash=impl.source_hash, bucket=spec.bucket(spec.check(x)),
                        flags="", shape_text="64x64", config_space=space)
        study = optuna.create_study(study_name=target.study_name, storage=optuna_storage(url))
        for config, ms, spread in trials[::order]:
            study.add_trial(optuna.trial.create_trial(
                params=config, distributions={k: CategoricalDistribution(v) for k, v in space.items()}, value=ms,
                user_attrs={"outcome": "ok", "spread": spread, "repeats": 10}))
        result = search(store, None, target, TuneOptions(trials=0))  # type: ignore[arg-type]  # no trial runs
        save_winner(store, result.winner)


def _explain(url: str, shape: str, tmp_path: Path) -> dict:
    code = (f"import json, torch, kernelzoo\nc = kernelzoo.explain('relu', torch.randn({shape}))\n"
            "print(json.dumps({'plugin': c.plugin, 'config': dict(c.config), 'reason': c.reason}))")
    # the read may take its time on a busy machine: this test is about which winner is read, not how fast
    done = python(code, env={"KERNELZOO_DB": url, "KERNELZOO_CACHE_DIR": str(tmp_path / "rank-cache"),
                             "KERNELZOO_DB_WAIT_MS": "10000"})
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_two_databases_with_the_same_trials_in_another_order_pick_the_same_winners(tmp_path, monkeypatch):
    monkeypatch.setenv("KERNELZOO_CACHE_DIR", str(tmp_path / "cache"))
    urls = [f"sqlite:///{tmp_path / name}" for name in ("a.sqlite", "b.sqlite")]
    for url, order in zip(urls, (1, -1), strict=True):
        _fill(url, order)
    stored = [sorted((w.plugin, json.dumps(dict(w.config)), w.time_ms) for w in winners(open_store(u))) for u in urls]
    assert stored[0] == stored[1] and len(stored[0]) == 3
    hashes = [snapshot_data(open_store(u))["hash"] for u in urls]
    assert hashes[0] == hashes[1]
    picked = [_explain(u, "64, 64", tmp_path) for u in urls]
    assert picked[0] == picked[1] and picked[0]["plugin"] == "openmp"  # the CPU order breaks the tie in noise
    forget_stores()


def test_db_snapshot_is_what_dispatch_reads_and_nothing_is_written(tmp_path, monkeypatch):
    monkeypatch.setenv("KERNELZOO_CACHE_DIR", str(tmp_path / "cache"))
    url = f"sqlite:///{tmp_path / 'tuning.sqlite'}"
    _fill(url, 1)
    forget_stores()
    file = tmp_path / "winners.json"
    done = kernelzoo_cli("db", "snapshot", str(file), "--db", url, timeout=120)
    assert done.returncode == 0, done.stderr
    snap = load_snapshot(file)
    assert done.stdout.strip() == snap.hash == snapshot_data(open_store(url))["hash"] and snap.intact
    assert {w.plugin for w in snap.winners} == {"openmp", "python", "torch"}
    before = file.read_bytes()
    exact = _explain(f"snapshot:{file}", "64, 64", tmp_path)
    assert exact["plugin"] == "openmp" and "snapshot winners.json" in exact["reason"]
    missed = _explain(f"snapshot:{file}", "48, 40", tmp_path)  # another bucket: the nearest, nothing recorded
    assert missed["plugin"] == "openmp" and missed["reason"].startswith("tuned (nearest bucket")
    assert file.read_bytes() == before and not list((tmp_path / "rank-cache").rglob("*.sqlite"))
    assert _rows(url, "SELECT count(*) AS n FROM kz_missed_keys") == [{"n": 0}]
    forget_stores()


RANK = """
import sys
import torch.distributed as dist
from kernelzoo import distributed
rank, rendezvous, snapshot = int(sys.argv[1]), sys.argv[2], sys.argv[3]
dist.init_process_group("gloo", init_method="file://" + rendezvous, rank=rank, world_size=2)
distributed.use_snapshot(snapshot)
try:
    print("same", distributed.check_same_winners())
except distributed.WinnersDiffer as exc:
    print("differ", exc.ranks, str(exc).replace(chr(10), " "))
dist.destroy_process_group()
"""


def _ranks(tmp_path: Path, files: list[Path], run: int) -> list[str]:
    script = tmp_path / "rank.py"
    script.write_text(RANK)
    env = {**os.environ, "KERNELZOO_CACHE_DIR": str(tmp_path / "rank-cache")}
    procs = [subprocess.Popen([sys.executable, str(script), str(r), str(tmp_path / f"rdzv{run}"), str(f)], env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for r, f in enumerate(files)]
    outs = []
    for p in procs:
        out, err = p.communicate(timeout=180)
        assert p.returncode == 0, err
        outs.append(out.strip())
    return outs


def test_check_same_winners_passes_on_one_snapshot_and_names_the_rank_that_differs(tmp_path, monkeypatch):
    monkeypatch.setenv("KERNELZOO_CACHE_DIR", str(tmp_path / "cache"))
    url = f"sqlite:///{tmp_path / 'tuning.sqlite'}"
    _fill(url, 1)
    file = tmp_path / "winners.json"
    assert kernelzoo_cli("db", "snapshot", str(file), "--db", url, timeout=120).returncode == 0
    digest = load_snapshot(file).hash
    assert _ranks(tmp_path, [file, file], 0) == [f"same {digest}"] * 2
    altered = tmp_path / "altered.json"  # one record edited by hand; the hash written in the file left as it was
    data = json.loads(file.read_text())
    data["records"][0]["time_ms"] *= 2
    altered.write_text(json.dumps(data))
    assert content_hash(data["records"]) != digest
    outs = _ranks(tmp_path, [file, altered], 1)
    for out in outs:
        assert out.startswith("differ [1] ranks 1 dispatch from other winners"), out
        assert "rank 1: winners hash" in out and "altered.json" in out
    forget_stores()
    reset_lookup()
