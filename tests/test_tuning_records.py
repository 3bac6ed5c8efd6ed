"""Tuning records over their life: per-config validity, stale records after a code edit, provisional records
borrowed from a sibling GPU and verified, winners never replaced by worse results, studies that never measure a
config twice, and the schema's alembic upgrade of a database written by kernelzoo 0.1.0.

The kernel these tests edit is a toy plugin written into a temporary directory (``kz_life``); the tuner's
workers import it from there, as they import tuning_toys.py.
"""

from __future__ import annotations

import contextlib
import importlib
import shutil
import sqlite3
import sys
from dataclasses import replace
from pathlib import Path

import optuna
import pytest
import torch
from sqlalchemy import select
from tuning_helpers import TESTS, reset_lookup, temporary_db

import kernelzoo
from kernelzoo import cli, dispatch
from kernelzoo.db import lifecycle, lookup, schema, shipped
from kernelzoo.db.models import SCHEMA_VERSION, Origin, TrialModel
from kernelzoo.db.records import Winner, save_winner, winners
from kernelzoo.db.store import forget_stores, open_store
from kernelzoo.fingerprint import Fingerprint
from kernelzoo.registry import registry
from kernelzoo.tuner import retime
from kernelzoo.tuner.pool import WorkerPool
from kernelzoo.tuner.search import SearchResult, TuneOptions, optuna_storage
from kernelzoo.tuner.tune import tune_op
from tests.postgres import postgres_url  # noqa: F401 (a fixture)

TIMEOUT_S = 30.0
OPTIONS = TuneOptions(trials=20, timeout_s=TIMEOUT_S, budget_ms=2, warmup=1, calibrate=False)
X = torch.randn(64)
TOY = '''
"""A toy op for the record-lifecycle tests: relu, with a plugin whose config is a block size."""

import torch

from kernelzoo.elementwise import UnaryOp
from kernelzoo.registry import Call, Implementation


class KzLife(UnaryOp):
    name = "kz_life"
    shapes = {"cpu": [(64,)]}

    def reference(self, call: Call) -> torch.Tensor:
        return torch.relu(call.inputs["x"].double())


class KzLifeTiles(Implementation):
    op = "kz_life"
    plugin = "tiles"
    dtypes = {"cpu": (torch.float32,)}
    config_space = {"BLOCK": BLOCKS}
    default_config = {"BLOCK": 1}

    def run(self, call: Call, config: dict) -> torch.Tensor:
        # COMMENT
        return torch.relu(call.inputs["x"])
'''


def sibling(name: str, sm_count: int = 132, capability: str = "9.0") -> Fingerprint:
    return Fingerprint(kind="cuda", name=name, capability=capability, sm_count=sm_count, driver="580.0, CUDA 13.0",
                       cuda="13.0", nvrtc="13.0", triton="3.6.0")


H200, NVL = sibling("NVIDIA H200"), sibling("NVIDIA H100 NVL")


class Toy:
    """The toy plugin's file in ``directory``: write it (its space, its comment) and register it here and in the
    tuner's workers."""

    def __init__(self, directory: Path, mp: pytest.MonkeyPatch) -> None:
        self.path = directory / "kz_life_toy.py"
        mp.syspath_prepend(str(directory))
        mp.setenv("PYTHONPATH", ":".join([str(directory), str(TESTS)]))
        mp.setenv("KERNELZOO_EXTRA_PLUGINS", "kz_life_toy")
        mp.setattr(sys, "dont_write_bytecode", True)

    def write(self, blocks: list[int], comment: str = "the kernel") -> None:
        self.path.write_text(TOY.replace("BLOCKS", repr(blocks)).replace("COMMENT", comment))
        module = importlib.reload(sys.modules["kz_life_toy"]) if "kz_life_toy" in sys.modules else \
            importlib.import_module("kz_life_toy")
        registry.load().register_module(module)
        reset_lookup()

    @property
    def impl(self):
        return registry.impl("kz_life", "tiles")


@pytest.fixture
def toy(tmp_path, monkeypatch):
    (tmp_path / "shipped").mkdir()
    monkeypatch.setattr(shipped, "shipped_dir", lambda: tmp_path / "shipped")  # the synthetic GPUs' records only
    with temporary_db(tmp_path, monkeypatch) as url:
        toy = Toy(tmp_path / "plugin", monkeypatch)
        toy.path.parent.mkdir()
        toy.url = url
        try:
            yield toy
        finally:
            registry.ops.pop("kz_life", None)
            registry.impls.pop("kz_life", None)
            sys.modules.pop("kz_life_toy", None)


def measured(store) -> list[dict]:
    """The configs measured so far (one trial record per measurement), in order."""
    return store.transaction(lambda s: [t.config for t in s.scalars(
        select(TrialModel).where(TrialModel.op == "kz_life").order_by(TrialModel.trial_id))])


def tune(store, fp: Fingerprint | None = None, pool: WorkerPool | None = None, **options) -> SearchResult:
    """Tune kz_life in new workers (they import the toy's file as it is now), or in ``pool``'s; the search."""
    with WorkerPool(TIMEOUT_S) if pool is None else contextlib.nullcontext(pool) as workers:
        (report,) = tune_op(store, workers, "kz_life", device="cpu", shapes=[(64,)], dtypes=["float32"],
                            options=replace(OPTIONS, **options), **({"fp": fp} if fp is not None else {}))
    (plugin,) = report.plugins
    return plugin.result


def retimed(run, store) -> list:
    """``tune --stale`` or ``--verify`` (``run``) in new workers; its reports."""
    with WorkerPool(TIMEOUT_S) as pool:
        return run(store, pool, device="cpu", options=OPTIONS)


def explain() -> kernelzoo.Choice:
    return kernelzoo.explain("kz_life", X)


def test_an_added_config_is_measured_alone_and_a_removed_one_drops_only_its_records(toy):
    store = open_store(toy.url)
    toy.write([1, 2, 4])
    tune(store)
    assert sorted(c["BLOCK"] for c in measured(store)) == [1, 2, 4]
    toy.write([1, 2, 4, 8])  # one more config: the new study starts with the three measurements
    result = tune(store)
    assert [c["BLOCK"] for c in measured(store)][3:] == [8]
    assert result.ok == 4, "the three stored measurements count toward the study"
    (winner,) = winners(store, op="kz_life")
    assert lifecycle.is_current(winner)
    toy.write([b for b in (1, 2, 4, 8) if b != winner.config["BLOCK"]])  # the winner's config leaves
    assert not lifecycle.is_current(winner)
    assert "no longer in the space" in lifecycle.stale_reason(winner)
    assert explain().reason == "default order"
    tune(store)
    assert len(measured(store)) == 4, "the configs still in the space were not measured again"
    assert {w.config["BLOCK"] for w in winners(store, op="kz_life") if lifecycle.is_current(w)} <= {1, 2, 4, 8}
    assert explain().reason.startswith("tuned (exact bucket")


def test_a_code_edit_leaves_stale_records_and_tune_stale_retimes_only_their_configs(toy, capsys):
    store = open_store(toy.url)
    toy.write([1, 2, 4, 8])
    tune(store)
    assert len(measured(store)) == 4
    (before,) = winners(store, op="kz_life")
    assert explain().reason == "tuned (exact bucket n=2^6)"
    toy.write([1, 2, 4, 8], comment="the kernel, with a comment edited")
    (stale,) = winners(store, op="kz_life")
    assert stale == before, "kept, unchanged"
    assert lifecycle.is_stale(stale) and not lifecycle.is_current(stale)
    assert lifecycle.stale_reason(stale) == "kz_life_toy.py changed since it was tuned"
    choice = explain()
    assert (choice.plugin, dict(choice.config)) == ("tiles", {"BLOCK": 1}), "the default config, not the stale"
    assert choice.reason.startswith("default order (stale: tiles (kz_life_toy.py changed since it was tuned)")
    assert cli.main(["show", "--op", "kz_life", "--db", toy.url]) == 0
    out = capsys.readouterr().out
    assert "(stale: kz_life_toy.py changed since it was tuned)" in out and "1 stale record(s)" in out
    reports = retimed(retime.tune_stale, store)
    assert [c["BLOCK"] for c in measured(store)][4:] == [before.config["BLOCK"]], "the stale config alone"
    assert [r.winner for r in reports] == ["tiles"]
    assert retimed(retime.tune_stale, store) == []
    assert cli.main(["tune", "--stale", "--pending", "--device", "cpu", "--quiet", "--db", toy.url]) == 0
    assert "no stale records on cpu" in capsys.readouterr().err
    fresh = [w for w in winners(store, op="kz_life") if lifecycle.is_current(w)]
    assert [w.config for w in fresh] == [before.config]
    assert len(winners(store, op="kz_life")) == 2, "the stale record is kept beside the current one"
    assert explain().reason == "tuned (exact bucket n=2^6)"
    assert dict(explain().config) == before.config


def test_a_sibling_gpu_runs_the_provisional_winner_and_tune_verify_promotes_it(toy, monkeypatch):
    store = open_store(toy.url)
    toy.write([1, 2, 4, 8])
    tune(store, fp=H200)  # measured on the CPU, recorded as the H200's
    (h200,) = winners(store, op="kz_life")
    assert h200.device == H200
    for here, expected in ((H200, "tuned (exact bucket n=2^6)"),
                           (NVL, "provisional (tuned on NVIDIA H200), exact bucket n=2^6"),
                           (sibling("NVIDIA A100", 108, "8.0"), "default order")):
        monkeypatch.setattr(lookup, "fingerprint", lambda device, here=here: here)
        reset_lookup()
        assert explain().reason == expected, here.name
    monkeypatch.setattr(lookup, "fingerprint", lambda device: NVL)
    reset_lookup()
    assert dict(explain().config) == h200.config
    spec = registry.op("kz_life")
    assert dispatch.run_call(spec, spec.check(X)).equal(torch.relu(X))
    before = len(measured(store))
    monkeypatch.setattr(retime, "device_fingerprint", lambda pool, device: NVL)
    reports = retimed(retime.tune_verify, store)
    verified = measured(store)[before:]
    assert len(verified) == retime.TOP and verified[0] == h200.config, "the top configs, the winner's first"
    assert [r.winner for r in reports] == ["tiles"]
    assert retimed(retime.tune_verify, store) == []
    (own,) = winners(store, op="kz_life", device_hash=NVL.hash)
    assert own.origin == Origin.VERIFIED and own.config in verified
    reset_lookup()
    assert explain().reason == "tuned (exact bucket n=2^6)"


def test_the_nearest_sibling_is_by_sm_count_then_memory_bandwidth():
    impl = registry.impl("relu", "torch")

    def record(fp: Fingerprint, bucket: tuple[int, ...] = (12,)) -> Winner:
        return Winner(op="relu", plugin="torch", source_hash=impl.source_hash, device=fp, dtype="float32",
                      bucket=bucket, flags="", config={}, time_ms=1.0, spread=0.01)

    sxm, pcie, h200 = sibling("NVIDIA H100 80GB HBM3"), sibling("NVIDIA H100 PCIe", 114), H200
    a100 = sibling("NVIDIA A100-SXM4-80GB", 132, "8.0")
    assert [w.device for w in lifecycle.borrow(NVL, [], [record(pcie), record(h200), record(sxm)])] == [sxm]
    assert [w.device for w in lifecycle.borrow(NVL, [], [record(pcie), record(h200)])] == [h200]
    assert lifecycle.borrow(NVL, [], [record(a100)]) == [], "never across compute capabilities"
    assert lifecycle.borrow(NVL, [record(NVL)], [record(h200)]) == [], "a current record of its own comes first"
    assert [w.bucket for w in lifecycle.borrow(NVL, [record(NVL)], [record(h200, (13,))])] == [(13,)]
    stale = replace(record(h200), source_hash="0" * 16)
    assert lifecycle.borrow(NVL, [], [stale]) == [], "the same kernel code only"


def test_a_stored_winner_is_never_replaced_by_a_worse_result(toy):
    """Two tuners of one key: the one that finishes last may hold an older, slower result of the study."""
    toy.write([1, 2, 4, 8])
    store = open_store(toy.url)
    impl = toy.impl
    fast = Winner(op="kz_life", plugin="tiles", source_hash=impl.source_hash, device=H200, dtype="float32",
                  bucket=(6,), flags="", config={"BLOCK": 2}, time_ms=0.039, spread=0.02, shape="64", trials=6)
    save_winner(store, fast)
    save_winner(store, replace(fast, time_ms=20.007, trials=1))
    assert winners(store, op="kz_life") == [fast], "a slower result of the same config"
    save_winner(store, replace(fast, config={"BLOCK": 4}, time_ms=0.0385))
    assert winners(store, op="kz_life") == [fast], "another config, faster by less than the noise"
    assert save_winner(store, replace(fast, config={"BLOCK": 4}, time_ms=0.02))
    assert winners(store, op="kz_life")[0].config == {"BLOCK": 4}


def test_a_shared_study_never_measures_a_config_another_tuner_finished(toy, monkeypatch):
    """While this tuner measures its first config, another tuner of the same study finishes BLOCK=8."""
    toy.write([1, 2, 4, 8])
    store = open_store(toy.url)
    asked: list[dict] = []
    with WorkerPool(TIMEOUT_S) as pool:
        trial = pool.trial

        def measure(plugin, device, msg):
            asked.append(msg["config"])
            if len(asked) == 1:
                (name,) = [s.study_name for s in optuna.get_all_study_summaries(optuna_storage(toy.url))]
                other = optuna.load_study(study_name=name, storage=optuna_storage(toy.url))
                other.add_trial(optuna.trial.create_trial(
                    params={"BLOCK": 8}, distributions={"BLOCK": optuna.distributions.CategoricalDistribution(
                        [1, 2, 4, 8])}, value=0.5, user_attrs={"outcome": "ok", "spread": 0.01}))
            return trial(plugin, device, msg)

        monkeypatch.setattr(pool, "trial", measure)
        tune(store, pool=pool)
    assert sorted(c["BLOCK"] for c in asked) == [1, 2, 4]


@pytest.mark.parametrize("backend", ["sqlite", "postgresql"])
def test_a_resumed_study_measures_distinct_configs_and_counts_them(toy, backend, request):
    """A killed run resumed: the seeded sampler must not replay the first run's proposals, and --trials counts the
    distinct configs measured."""
    url = toy.url if backend == "sqlite" else request.getfixturevalue("postgres_url")
    toy.write(list(range(1, 25)))
    store = open_store(url)
    tune(store, trials=4)
    assert len(measured(store)) == 4
    result = tune(store, trials=9)  # the resumed run
    configs = [c["BLOCK"] for c in measured(store)]
    assert len(configs) == 9 and len(set(configs)) == 9, configs
    assert result.ok == 9


def test_a_database_of_release_0_1_upgrades_in_place_and_loses_nothing(tmp_path, monkeypatch):
    """tests/data/tuning-v1.sqlite was written by kernelzoo 0.1.0: `tune --op softmax --device cpu --shape 8x32
    --dtype float32` of python, torch (one trial each) and openmp (three), then a call that missed 100x1000."""
    path = tmp_path / "tuning.sqlite"
    shutil.copy(TESTS / "data" / "tuning-v1.sqlite", path)
    with sqlite3.connect(path) as con:
        before = {t: con.execute(f"SELECT COUNT(*) FROM {t}").fetchone()[0] for t in (
            "kz_devices", "kz_winners", "kz_trials", "kz_missed_keys", "kz_shipped_imports", "trials")}
        old = con.execute("SELECT op, plugin, config, time_ms, source_hash FROM kz_winners ORDER BY plugin").fetchall()
    con.close()
    with temporary_db(tmp_path, monkeypatch) as url:
        store = open_store(url)
        assert schema.inspect_state(store).kind == "current"
        assert schema.revision(store) == schema.REVISIONS[SCHEMA_VERSION]
        rows = sorted(winners(store), key=lambda w: w.plugin)
        assert [(w.op, w.plugin, w.time_ms) for w in rows] == [(o, p, t) for o, p, _, t, _ in old]
        for w, (*_, old_hash) in zip(rows, old):
            impl = registry.impl(w.op, w.plugin)
            from kernelzoo.db.legacy import legacy_hash

            if legacy_hash(impl) == old_hash:  # measured on the installed code: re-keyed, current, its files named
                assert lifecycle.is_current(w) and w.code_files == impl.code_files
            else:  # the code changed since: kept as stale
                assert lifecycle.is_stale(w) and "predates per-file hashes" in lifecycle.stale_reason(w)
        forget_stores()
    with sqlite3.connect(path) as con:
        after = {t: con.execute(f"SELECT COUNT(*) FROM {t}").fetchone()[0] for t in before}
        assert con.execute("SELECT version FROM kz_schema_versions").fetchone() == (SCHEMA_VERSION,)
        assert con.execute("SELECT version_num FROM alembic_version").fetchone() is not None, "Optuna's, untouched"
    con.close()
    assert after == before


def test_db_upgrade_reports_the_versions(tmp_path):
    path = tmp_path / "tuning.sqlite"
    shutil.copy(TESTS / "data" / "tuning-v1.sqlite", path)
    from kernelzoo.db.store import Store

    assert schema.upgrade(Store(f"sqlite:///{path}")) == (1, SCHEMA_VERSION)
    assert schema.upgrade(Store(f"sqlite:///{path}")) == (SCHEMA_VERSION, SCHEMA_VERSION)
    forget_stores()


def test_a_fresh_database_matches_the_upgraded_one(tmp_path):
    """The tables created from the models equal those the revisions build from release 0.1.0."""
    from sqlalchemy import create_engine, inspect

    upgraded = tmp_path / "upgraded.sqlite"
    shutil.copy(TESTS / "data" / "tuning-v1.sqlite", upgraded)
    open_store(f"sqlite:///{upgraded}")
    open_store(f"sqlite:///{tmp_path / 'fresh.sqlite'}")
    forget_stores()

    def columns(path: Path) -> dict:
        engine = create_engine(f"sqlite:///{path}")
        found = inspect(engine)
        out = {t: sorted((c["name"], str(c["type"]), c["nullable"]) for c in found.get_columns(t))
               for t in found.get_table_names() if t.startswith("kz_")}
        engine.dispose()
        return out

    assert columns(upgraded) == columns(tmp_path / "fresh.sqlite")


CREATE = """
import sys
from kernelzoo.db.store import open_store
from kernelzoo.tuner.search import optuna_storage
open_store(sys.argv[1])
optuna_storage(sys.argv[1])
print("ok")
"""


@pytest.mark.parametrize("backend", ["sqlite", "postgresql"])
def test_processes_that_start_on_a_new_database_at_once_create_its_schema_once(tmp_path, backend, request):
    """Four processes open one fresh database together: none fails (on PostgreSQL the kz_origin type was created
    twice: pg_type_typname_nsp_index), and the schema is there once, at the current revision."""
    import subprocess

    url = f"sqlite:///{tmp_path / 'tuning.sqlite'}" if backend == "sqlite" else request.getfixturevalue("postgres_url")
    runs = [subprocess.Popen([sys.executable, "-c", CREATE, url], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             text=True) for _ in range(4)]
    results = [run.communicate(timeout=120) for run in runs]
    assert [r.returncode for r in runs] == [0] * 4, [err[-2000:] for _, err in results]
    store = open_store(url)
    assert schema.inspect_state(store).kind == "current"
    assert schema.revision(store) == schema.REVISIONS[SCHEMA_VERSION]
    forget_stores()


def relabelled_shipped_file(directory: Path, here: Fingerprint, op: str | None = None) -> Fingerprint:
    """The shipped H200 file's records (of ``op``) written to ``directory`` as if tuned on a sibling of ``here``:
    another GPU name and SM count, ``here``'s compute capability. The sibling's fingerprint."""
    import json

    data = json.loads((TESTS.parent / "tuning_db" / "h200.json").read_text())
    relabelled = replace(here, name=f"NVIDIA sibling of {here.name}", sm_count=here.sm_count + 4)
    data["records"] = [{**r, "device": relabelled.to_dict(), "device_hash": relabelled.hash}
                       for r in data["records"] if op is None or r["op"] == op]
    (directory / "sibling.json").write_text(json.dumps(data))
    return relabelled


needs_gpu = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU: provisional records of a "
                               "shipped file relabelled as a sibling GPU's, dispatched and verified on the GPU")


@pytest.mark.gpu
@needs_gpu
def test_on_a_gpu_a_sibling_s_shipped_record_is_provisional_and_runs(tmp_path, monkeypatch):
    from kernelzoo.fingerprint import fingerprint

    here = fingerprint("cuda")
    sibling_fp = relabelled_shipped_file(tmp_path, here, "attention")
    monkeypatch.setattr(shipped, "shipped_dir", lambda: tmp_path)
    with temporary_db(tmp_path / "db", monkeypatch):
        spec = registry.op("attention")
        records = [w for w in lifecycle.shipped_records("attention") if w.dtype == "float16"]
        smallest = min(records, key=lambda w: (spec.parse_shape(w.shape), w.flags))
        call = spec.example(spec.parse_shape(smallest.shape), torch.float16, "cuda")
        assert spec.flags(call) == smallest.flags
        choice = dispatch.choose(spec, call)
        assert choice.reason.startswith(f"provisional (tuned on {sibling_fp.name}), exact bucket"), choice.reason
        out = dispatch.run_call(spec, call)
        assert torch.isfinite(out if isinstance(out, torch.Tensor) else out[0]).all()


@pytest.mark.gpu
@needs_gpu
def test_on_a_gpu_tune_verify_promotes_the_provisional_attention_records(tmp_path, monkeypatch):
    """`kernelzoo tune --verify` over the attention keys a sibling's file lends: each becomes this GPU's own."""
    import time

    from kernelzoo.fingerprint import fingerprint

    here = fingerprint("cuda")
    relabelled_shipped_file(tmp_path, here, "attention")
    monkeypatch.setattr(shipped, "shipped_dir", lambda: tmp_path)
    with temporary_db(tmp_path / "db", monkeypatch) as url:
        store = open_store(url)
        wanted = {(w.op, w.dtype, w.bucket, w.flags) for w in lifecycle.provisional_keys(store, here, "attention")}
        assert wanted
        start = time.perf_counter()
        with WorkerPool(60.0) as pool:
            retime.tune_verify(store, pool, device="cuda", op="attention",
                               options=TuneOptions(trials=retime.TOP, budget_ms=50, calibrate=False))
        print(f"tune --verify of {len(wanted)} attention keys: {time.perf_counter() - start:.0f} s")
        own = {(w.op, w.dtype, w.bucket, w.flags) for w in winners(store, op="attention", device_hash=here.hash)
               if w.origin == Origin.VERIFIED}
        assert own == wanted
        assert lifecycle.provisional_keys(store, here, "attention") == []


def test_a_postgresql_database_of_release_0_1_upgrades_in_place(postgres_url):  # noqa: F811 (the fixture)
    """The release's tables built by the first revision, a winner of the old hash in them: the upgrade re-keys it
    and the new origin can be written (PostgreSQL's kz_origin type gains 'VERIFIED')."""
    import json

    import sqlalchemy as sa

    from kernelzoo.db.legacy import legacy_hash

    impl = registry.impl("softmax", "torch")
    engine = sa.create_engine(postgres_url)
    with engine.begin() as conn:
        schema._upgrade(conn, schema.REVISIONS[1])
        device = conn.execute(sa.text(
            "INSERT INTO kz_devices (fingerprint_hash, hardware_hash, kind, name, details, created_at) "
            "VALUES (:h, :hw, 'cuda', 'NVIDIA H200', :d, now()) RETURNING device_id"),
            {"h": H200.hash, "hw": H200.hardware_hash, "d": json.dumps(H200.to_dict())}).scalar_one()
        conn.execute(sa.text(
            "INSERT INTO kz_winners (op, plugin, source_hash, device_id, dtype, bucket, flags, config, time_ms, "
            "spread, shape, trials, origin, updated_at) VALUES ('softmax', 'torch', :s, :d, 'float16', '10,12', '', "
            "'{}', 0.5, 0.01, '1024x4096', 1, 'TUNED', now())"), {"s": legacy_hash(impl), "d": device})
    engine.dispose()
    store = open_store(postgres_url)
    assert schema.inspect_state(store).kind == "current"
    (w,) = winners(store)
    assert lifecycle.is_current(w) and w.code_files == impl.code_files and w.time_ms == 0.5
    save_winner(store, replace(w, device=NVL, origin=Origin.VERIFIED))
    assert {v.origin for v in winners(store)} == {Origin.TUNED, Origin.VERIFIED}
    forget_stores()


def test_a_records_code_covers_the_family_modules_its_kernel_takes_code_from() -> None:
    """A Triton kernel's jit helpers or a CUDA plugin's launch helpers may live in a family module the plugin only
    imports from: editing them changes what was measured, so they are part of the code hash. An op's own spec
    package is not: editing its checks keeps the records."""
    from kernelzoo.implementation import _family_modules
    from kernelzoo.registry import registry

    softmax = registry.impl("softmax", "triton").code_files
    assert "kernelzoo_plugins/_rows/triton.py" in softmax  # programs in flight, tiles: imported, not a base class
    attention = registry.impl("attention", "triton").code_files
    assert {"kernelzoo_plugins/_flash/triton.py", "kernelzoo_plugins/_flash/spec.py"} <= set(attention)
    for impl in registry:
        assert not any(name.endswith("__init__.py") and "/_" not in name for name in impl.code_files), impl.key
    import kernelzoo_plugins._flash.triton as flash

    assert flash not in _family_modules([flash])  # a module is not its own family dependency


def test_the_summary_of_a_re_time_shows_what_was_timed_when_the_keys_winner_was_not() -> None:
    """tune --stale re-times the stale records' plugins alone; the key's winner may be another plugin, not timed in
    that run: the summary names the fastest plugin timed, and the key's winner beside it."""
    from types import SimpleNamespace as Ns

    from kernelzoo.tuner.report import format_summary

    timed = Ns(time_ms=0.42, spread=0.01, config={"BLOCK": 4})
    key = Ns(op="kz_op", dtype="float16", shape_text="4x32", flags="", winner="cuda", ceilings=None,
             fingerprint=Ns(describe=lambda: "NVIDIA H200"),
             plugins=[Ns(plugin="torch", skipped=None, result=Ns(winner=timed))])
    text = format_summary(Ns(keys=[key], load=None, cores=None, skipped=[], not_started=[], untuned=[], seconds=3.0))
    row = next(line for line in text.splitlines() if line.startswith("kz_op"))
    assert "torch (key: cuda)" in row and "0.42" in row and "no verified config" not in row
