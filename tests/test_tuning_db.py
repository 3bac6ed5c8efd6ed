"""The tuning database: round trips, keys that expire, schema versions, damaged and locked files,
shipped winners, missed keys, and what dispatch makes of them. No worker runs here."""

from __future__ import annotations

import hashlib
import json
import sqlite3
import warnings
from dataclasses import replace
from pathlib import Path

import pytest
import torch
from sqlalchemy import select
from tuning_helpers import reset_lookup, temporary_db

import kernelzoo
from kernelzoo import cli
from kernelzoo.bench.cases import plugin_config
from kernelzoo.db import records, shipped, store
from kernelzoo.db.models import SCHEMA_VERSION, Origin, SchemaVersionModel, ShippedImportModel
from kernelzoo.db.prune import prune
from kernelzoo.db.ranking import pick_winner
from kernelzoo.db.records import Winner, missed_keys, save_winner, winners
from kernelzoo.db.store import forget_stores, open_store
from kernelzoo.db.transfer import FORMAT, FORMAT_VERSION, to_record
from kernelzoo.errors import DatabaseError
from kernelzoo.fingerprint import cpu_fingerprint
from kernelzoo.registry import registry

X = torch.randn(64, 64)  # relu's bucket: 4096 elements, n=2^12


@pytest.fixture
def tmp_db(tmp_path, monkeypatch):
    """A new SQLite database, the default (KERNELZOO_DB) for this test; its URL."""
    with temporary_db(tmp_path, monkeypatch) as url:
        yield url


def relu_winner(plugin: str = "python", bucket: tuple[int, ...] = (12,), **changes) -> Winner:
    impl = registry.impl("relu", plugin)
    w = Winner(op="relu", plugin=plugin, source_hash=impl.source_hash, device=cpu_fingerprint(), dtype="float32",
               bucket=bucket, flags="", config=impl.config(), time_ms=0.5, spread=0.01, shape="64x64", trials=3)
    return replace(w, **changes)


def explain(x: torch.Tensor = X) -> kernelzoo.Choice:
    return kernelzoo.explain("relu", x)


def test_winners_round_trip_through_the_database_and_an_export(tmp_db, tmp_path):
    saved = [relu_winner("python", config={}), relu_winner("torch", bucket=(20,), time_ms=2.0)]
    db = open_store(tmp_db)
    for w in saved:
        save_winner(db, w)
    assert winners(db, op="relu") == sorted(saved, key=lambda w: (w.bucket, w.plugin))
    export = tmp_path / "winners.json"
    assert cli.main(["db", "export", str(export), "--db", tmp_db]) == 0
    assert json.loads(export.read_text())["format"] == FORMAT
    other = f"sqlite:///{tmp_path / 'other.sqlite'}"
    assert cli.main(["db", "import", str(export), "--db", other]) == 0
    imported = winners(open_store(other), op="relu")
    assert [replace(w, origin=Origin.TUNED) for w in imported] == winners(db, op="relu")
    assert {w.origin for w in imported} == {Origin.IMPORTED}


def test_a_changed_kernel_code_or_a_config_out_of_the_space_is_a_miss(tmp_db, monkeypatch):
    save_winner(open_store(tmp_db), relu_winner("python"))
    assert (explain().plugin, explain().reason) == ("python", "tuned (exact bucket n=2^12)")
    original = registry.impl("relu", "python")
    wider = type(original)()
    wider.config_space = {"unroll": [1, 2]}  # same code; the stored config {} is no point of this space
    assert wider.source_hash == original.source_hash
    monkeypatch.setitem(registry.impls["relu"], "python", wider)
    reset_lookup()
    assert explain().reason == "default order"
    edited = type(original)()
    edited.__dict__["source_hash"] = "0" * 16  # as if its code had changed: the record is stale, kept, not run
    monkeypatch.setitem(registry.impls["relu"], "python", edited)
    reset_lookup()
    assert explain().reason.startswith("default order (stale: python (")
    assert len(winners(open_store(tmp_db))) == 1


def test_dispatch_picks_the_tuned_winner_and_use_overrides_it(tmp_db):
    save_winner(open_store(tmp_db), relu_winner("python"))
    assert explain().plugin == "python"
    with kernelzoo.use("torch"):
        assert (explain().plugin, explain().reason) == ("torch", "forced")
        assert torch.equal(kernelzoo.ops.relu(X), torch.relu(X))
    near = explain(torch.randn(128, 64))
    assert (near.plugin, near.reason) == ("python", "tuned (nearest bucket n=2^12 for n=2^13)")
    assert torch.equal(kernelzoo.ops.relu(X), torch.relu(X))


def test_a_forced_plugin_runs_its_tuned_config(tmp_db):
    db = open_store(tmp_db)
    save_winner(db, relu_winner("python", time_ms=0.1))  # the fastest: what dispatch picks unforced
    save_winner(db, relu_winner("openmp", config={"threads": 1}, time_ms=0.5))
    assert explain().plugin == "python"
    with kernelzoo.use("openmp"):
        exact, near = explain(), explain(torch.randn(128, 64))
        assert torch.equal(kernelzoo.ops.relu(X), torch.relu(X))
    assert (exact.plugin, dict(exact.config)) == ("openmp", {"threads": 1})
    assert exact.reason == "forced, tuned (exact bucket n=2^12)"
    assert exact.forced and not exact.nearest
    assert (near.plugin, dict(near.config)) == ("openmp", {"threads": 1})
    assert near.reason == "forced, tuned (nearest bucket n=2^12 for n=2^13)"
    assert near.forced and near.nearest
    with kernelzoo.use("torch"):  # no record of its own: its default, whatever the others' records
        assert (explain().plugin, explain().reason) == ("torch", "forced")


def test_the_benchmark_runs_each_plugin_with_the_config_a_forced_call_runs(tmp_db):
    save_winner(open_store(tmp_db), relu_winner("openmp", config={"threads": 1}))
    spec = registry.op("relu")
    openmp, torch_impl = registry.impl("relu", "openmp"), registry.impl("relu", "torch")
    assert plugin_config(spec, openmp, spec.check(X)) == ({"threads": 1}, "tuned")
    assert plugin_config(spec, openmp, spec.check(torch.randn(128, 64))) == ({"threads": 1}, "tuned nearby")
    assert plugin_config(spec, torch_impl, spec.check(X)) == ({}, "default")


def test_a_forced_plugins_stale_record_is_not_used(tmp_db, monkeypatch):
    save_winner(open_store(tmp_db), relu_winner("openmp", config={"threads": 1}))
    edited = type(registry.impl("relu", "openmp"))()
    edited.__dict__["source_hash"] = "0" * 16  # as if its source had changed since tuning
    monkeypatch.setitem(registry.impls["relu"], "openmp", edited)
    reset_lookup()
    with kernelzoo.use("openmp"):
        assert (explain().reason, dict(explain().config)) == ("forced", {"threads": 2})


def test_ties_within_measured_noise_go_to_the_plugin_order():
    torch_w = relu_winner("torch", time_ms=1.00, spread=0.05)
    assert pick_winner([torch_w, relu_winner("openmp", time_ms=1.03, spread=0.05)], "cpu").plugin == "openmp"
    assert pick_winner([torch_w, relu_winner("openmp", time_ms=1.20, spread=0.05)], "cpu").plugin == "torch"
    assert pick_winner([relu_winner("openmp", time_ms=1.03, spread=0.0), replace(torch_w, spread=0.0)],
                       "cpu").plugin == "torch"


def test_missed_keys_are_counted_once_per_process(tmp_db):
    for x in (X, X, torch.randn(32, 32)):
        explain(x)
    reset_lookup()  # flushes the writer; then the same key again, as a second process
    explain(X)
    reset_lookup()
    counts = {m.shape: m.count for m in missed_keys(open_store(tmp_db), cpu_fingerprint().hash)}
    assert counts == {"64x64": 2, "32x32": 1}


def _version(url: str, version: int) -> None:
    forget_stores()
    with sqlite3.connect(url.removeprefix("sqlite:///")) as con:
        con.execute(f"UPDATE {SchemaVersionModel.__tablename__} SET version = ?", (version,))
    con.close()


def test_a_newer_schema_is_never_written_and_the_message_names_the_version(tmp_db, capsys):
    open_store(tmp_db)
    _version(tmp_db, 99)
    path = tmp_db.removeprefix("sqlite:///")
    before = hashlib.sha256(Path(path).read_bytes()).hexdigest()
    with pytest.raises(DatabaseError, match="schema version 99.*needs a kernelzoo that uses schema version 99"):
        open_store(tmp_db)
    assert cli.main(["tune", "--op", "relu", "--device", "cpu", "--db", tmp_db]) == 1  # a runtime error
    assert "schema version 99" in capsys.readouterr().err
    with pytest.warns(RuntimeWarning, match="schema version 99"):
        assert explain().reason == "default order"
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # one warning per process, not one per key
        assert explain(torch.randn(8)).reason == "default order"
    forget_stores()
    assert hashlib.sha256(Path(path).read_bytes()).hexdigest() == before


@pytest.mark.parametrize("damage", ["truncated", "found while reading"])
def test_a_damaged_database_is_skipped_by_op_calls_and_moved_aside_when_opened_to_write(tmp_db, tmp_path,
                                                                                        monkeypatch, damage):
    path = tmp_path / "tuning.sqlite"
    if damage == "truncated":
        save_winner(open_store(tmp_db), relu_winner())
        forget_stores()
        with open(path, "r+b") as f:
            f.truncate(3 * 4096)  # of ~14 pages: the schema points past the end
    else:  # the schema reads fine, a later page does not
        open_store(tmp_db)

        def winners_damaged(*args, **kwargs):
            raise store.CorruptDatabase("the tuning database is damaged: database disk image is malformed")

        monkeypatch.setattr(records, "winners", winners_damaged)
    with pytest.warns(RuntimeWarning, match="is damaged"):
        assert explain().reason == "default order"
    assert not list(tmp_path.glob("tuning.sqlite.corrupt-*"))  # an op call moves nothing
    monkeypatch.undo()
    if damage == "truncated":
        with pytest.warns(RuntimeWarning, match="is damaged.*moved it to"):
            open_store(tmp_db, check=True)
        (moved,) = [p for p in tmp_path.glob("tuning.sqlite.corrupt-*") if not p.name.endswith(("-wal", "-shm"))]
        assert moved.read_bytes()[:16] == store.SQLITE_HEADER
        assert winners(open_store(tmp_db)) == []


def test_a_locked_database_never_breaks_an_op(tmp_db, tmp_path, monkeypatch):
    monkeypatch.setattr(store, "BUSY_TIMEOUT_MS", 100)
    monkeypatch.setattr(store, "RETRIES", 1)
    holder = sqlite3.connect(tmp_path / "tuning.sqlite", isolation_level=None)
    holder.execute("BEGIN EXCLUSIVE")
    try:
        with pytest.warns(RuntimeWarning, match="tuned winners are not used.*locked"):
            assert torch.equal(kernelzoo.ops.relu(X), torch.relu(X))
        assert explain().reason == "default order"
    finally:
        holder.execute("ROLLBACK")
        holder.close()


def test_shipped_winners_of_this_hardware_are_read_by_op_calls_and_imported_once_when_asked(tmp_db, tmp_path,
                                                                                            monkeypatch):
    here = cpu_fingerprint()
    other_software = replace(here, compiler="gcc 99.1", driver="x")  # same chip, other versions
    other_chip = replace(here, name="Another CPU", isa="sse2")
    records = [relu_winner("python", device=other_software),
               relu_winner("torch", device=other_chip, time_ms=0.1),
               relu_winner("torch", source_hash="0" * 16, time_ms=0.1)]  # a kernel since edited
    (tmp_path / "cpu.json").write_text(json.dumps(
        {"format": FORMAT, "version": FORMAT_VERSION, "records": [to_record(w) for w in records]}))
    monkeypatch.setattr(shipped, "shipped_dir", lambda: tmp_path)
    assert explain().plugin == "python"
    assert explain().reason.startswith("tuned (exact bucket n=2^12); stale: torch (")  # kept, not run
    assert not (tmp_path / "tuning.sqlite").exists()  # the op call read the file and wrote nothing
    import kernelzoo.db

    (imported,) = kernelzoo.db.import_shipped(tmp_db, devices=[here])
    assert imported[1].imported == 2  # the current record, and the stale one kept for `tune --stale`
    db = open_store(tmp_db)
    stored = {w.plugin: w for w in winners(db)}
    assert {(w.origin, w.device) for w in stored.values()} == {(Origin.SHIPPED, here)}
    assert sorted(stored) == ["python", "torch"] and stored["torch"].source_hash == "0" * 16
    assert len(db.transaction(lambda s: s.scalars(select(ShippedImportModel)).all())) == 1
    assert kernelzoo.db.import_shipped(tmp_db, devices=[here]) == []  # once per database and device
    save_winner(db, replace(stored["python"], time_ms=9.0, origin=Origin.TUNED, config={}))
    reset_lookup()  # a winner tuned here takes precedence over the shipped file's record of its plugin and key
    assert explain().config == registry.impl("relu", "python").config({})
    assert {w.plugin: w.time_ms for w in winners(db)}["python"] == 9.0


def test_db_import_skips_records_of_other_devices_unless_asked(tmp_db, tmp_path):
    elsewhere = replace(cpu_fingerprint(), name="Another CPU")
    export = tmp_path / "elsewhere.json"
    record = to_record(relu_winner(device=elsewhere))
    export.write_text(json.dumps({"format": FORMAT, "version": 1, "records": [record]}))
    assert cli.main(["db", "import", str(export), "--db", tmp_db]) == 0
    assert winners(open_store(tmp_db)) == []
    assert cli.main(["db", "import", str(export), "--any-device", "--db", tmp_db]) == 0
    assert [w.device for w in winners(open_store(tmp_db))] == [elsewhere]


def test_prune_drops_stale_winners_and_their_studies(tmp_db):
    import optuna

    from kernelzoo.tuner.search import optuna_storage

    db = open_store(tmp_db)
    save_winner(db, relu_winner("python"))
    save_winner(db, relu_winner("torch", source_hash="0" * 16))
    study = optuna.create_study(study_name="kernelzoo:relu:torch:stale", storage=optuna_storage(tmp_db))
    study.set_user_attr("op", "relu")
    study.set_user_attr("plugin", "torch")
    study.set_user_attr("source_hash", "0" * 16)
    done = prune(db)
    assert (done.winners, done.studies) == (1, 1)
    assert [w.plugin for w in winners(db)] == ["python"]


def test_show_and_doctor_report_the_database(tmp_db, capsys):
    save_winner(open_store(tmp_db), relu_winner("python"))
    save_winner(open_store(tmp_db), relu_winner("torch", time_ms=5.0))
    assert cli.main(["show", "--op", "relu", "--json", "--db", tmp_db]) == 0
    (shown,) = json.loads(capsys.readouterr().out)
    assert (shown["plugin"], shown["bucket"], shown["winner"]) == ("python", [12], True)
    assert cli.main(["show", "--all", "--db", tmp_db]) == 0
    assert "python *" in capsys.readouterr().out
    assert cli.main(["doctor", "--db", tmp_db]) == 0
    out = capsys.readouterr().out
    assert f"schema version {SCHEMA_VERSION}, healthy" in out and "1 key(s) with a current winner" in out
