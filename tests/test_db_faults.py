"""The tuning database under faults: an op call never waits long on it, never writes, and never breaks on what
it holds; other people's files are left alone; the CLI says what is wrong in one line. Each test is bounded in
time. The PostgreSQL cases are in test_db_faults_pg.py."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import sqlite3
import subprocess
import sys
import textwrap
import time
import warnings
from dataclasses import replace
from pathlib import Path

import pytest
import torch
from tuning_helpers import kernelzoo_cli, python, reset_lookup, temporary_db

import kernelzoo
import kernelzoo.db
from kernelzoo import cli
from kernelzoo.db import as_url, lookup
from kernelzoo.db.records import Winner, missed_keys, save_winner, winners
from kernelzoo.db.store import forget_stores, open_store
from kernelzoo.errors import DatabaseError
from kernelzoo.fingerprint import cpu_fingerprint
from kernelzoo.registry import registry

X = torch.randn(64, 100)  # softmax's bucket: 64 rows of 100


@pytest.fixture
def tmp_db(tmp_path, monkeypatch):
    """A new SQLite database, the default (KERNELZOO_DB) for this test; its URL."""
    with temporary_db(tmp_path, monkeypatch) as url:
        yield url


def softmax_winner(plugin: str = "torch", **changes) -> Winner:
    impl = registry.impl("softmax", plugin)
    spec = registry.op("softmax")
    call = spec.check(X)
    w = Winner(op="softmax", plugin=plugin, source_hash=impl.source_hash, device=cpu_fingerprint(),
               dtype="float32", bucket=spec.bucket(call), flags=spec.flags(call), config=impl.config(), time_ms=0.01,
               spread=0.01, shape="64x100", trials=3)
    return replace(w, **changes)


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def one_line_error(result: subprocess.CompletedProcess, *needles: str) -> str:
    """The CLI's stderr, checked to be one line starting 'kernelzoo:', naming each of ``needles``, no traceback."""
    err = result.stderr.strip()
    assert result.returncode == 1, (result.returncode, result.stdout, err)  # a runtime error
    assert "Traceback" not in err and len(err.splitlines()) == 1 and err.startswith("kernelzoo: "), err
    for needle in needles:
        assert needle in err, (needle, err)
    return err


# --- op calls never wait long and never write ----------------------------------------------------------------


def eventually_tuned(plugin: str, seconds: float = 20.0) -> None:
    """Wait until explain_softmax() names ``plugin`` (a read on a loaded host may outlast a call's wait)."""
    deadline = time.monotonic() + seconds
    while explain_softmax().plugin != plugin and time.monotonic() < deadline:
        time.sleep(0.05)
    assert explain_softmax().plugin == plugin


@pytest.mark.timeout(120)
def test_the_first_op_call_is_not_blocked_by_another_process_holding_the_write_lock(tmp_db, tmp_path,
                                                                                     monkeypatch):
    """SQLite: another process holds the write lock (BEGIN EXCLUSIVE in rollback-journal mode blocks readers too)
    for longer than any timeout; the first op call goes on with the default order, warns once, and writes
    nothing. The call used to block for 38 s writing a shipped-import row."""
    save_winner(open_store(tmp_db), softmax_winner("python", time_ms=0.001))
    forget_stores()
    path = tmp_path / "tuning.sqlite"
    with sqlite3.connect(path) as con:
        con.execute("PRAGMA journal_mode = DELETE")  # WAL readers would not wait at all: the harder case
    con.close()
    holder = subprocess.Popen([sys.executable, "-c", textwrap.dedent(f"""
        import sqlite3, sys, time
        con = sqlite3.connect({str(path)!r}, isolation_level=None)
        con.execute("BEGIN EXCLUSIVE")
        print("locked", flush=True)
        time.sleep(60)
        """)], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "locked"
        before = digest(path)
        monkeypatch.delenv("KERNELZOO_DB_WAIT_MS")  # the wait of an op call as shipped
        registry.load()
        kernelzoo.ops.softmax(torch.randn(3, 5))  # another group: imports and first-call costs kept out
        reset_lookup()
        start = time.perf_counter()
        with pytest.warns(RuntimeWarning, match="tuned winners are not used|did not answer"):
            out = kernelzoo.ops.softmax(X)
        took = time.perf_counter() - start
        assert took < 2.0, f"the first op call waited {took:.2f} s on a locked database"
        assert torch.allclose(out, torch.softmax(X, -1), atol=1e-6)
        assert explain_softmax().reason == "default order"
        assert digest(path) == before
    finally:
        holder.kill()
        holder.wait()
    reset_lookup()  # the lock is gone: a new process uses the winner
    eventually_tuned("python")


def explain_softmax(x: torch.Tensor = X) -> kernelzoo.Choice:
    return kernelzoo.explain("softmax", x)


def test_op_calls_write_nothing_and_missed_keys_are_written_when_flushed(tmp_db, tmp_path):
    """No database file appears from op calls alone; kernelzoo.db.flush_misses() records the missed keys."""
    kernelzoo.ops.softmax(X)
    kernelzoo.ops.softmax(torch.randn(8, 3))
    assert not (tmp_path / "tuning.sqlite").exists()
    assert kernelzoo.db.flush_misses() == 2
    shapes = sorted(m.shape for m in missed_keys(open_store(tmp_db), cpu_fingerprint().hash, "softmax"))
    assert shapes == ["64x100", "8x3"]
    assert kernelzoo.db.flush_misses() == 0


@pytest.mark.timeout(120)
def test_missed_keys_are_written_at_exit(tmp_path):
    db = tmp_path / "exit.sqlite"
    done = python("import torch, kernelzoo; kernelzoo.ops.softmax(torch.randn(4, 7))",
                  env={"KERNELZOO_DB": str(db)})
    assert done.returncode == 0, done.stderr
    assert [m.shape for m in missed_keys(open_store(str(db)), cpu_fingerprint().hash)] == ["4x7"]


def test_a_slow_read_lets_the_call_go_on_and_a_later_call_uses_the_winners(tmp_db, monkeypatch):
    """Past the wait the call runs the default order with one warning; when the read ends, later calls use it."""
    save_winner(open_store(tmp_db), softmax_winner("python", time_ms=0.001))
    monkeypatch.delenv("KERNELZOO_DB_WAIT_MS")  # the wait of an op call as shipped
    reset_lookup()
    release = __import__("threading").Event()
    read = lookup.WinnerLookup._read

    def slow_read(self, *args):
        release.wait(30)
        return read(self, *args)

    monkeypatch.setattr(lookup.WinnerLookup, "_read", slow_read)
    start = time.perf_counter()
    with pytest.warns(RuntimeWarning, match=r"did not answer within 0.1 s"):
        assert explain_softmax().reason == "default order"
    assert time.perf_counter() - start < 1.0
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # warned once
        assert explain_softmax().reason == "default order"
    release.set()
    eventually_tuned("python")


# --- rows are data -------------------------------------------------------------------------------------------


BAD_ROWS = {
    "bad JSON config": "UPDATE kz_winners SET config = '{\"threads\": ' WHERE plugin = 'python'",
    "bad bucket": "UPDATE kz_winners SET bucket = 'six,ten' WHERE plugin = 'python'",
    "unknown origin": "UPDATE kz_winners SET origin = 'BORROWED' WHERE plugin = 'python'",
    "empty device details": "UPDATE kz_devices SET details = '{}'",
}


@pytest.mark.parametrize("damage", list(BAD_ROWS))
def test_a_row_that_does_not_parse_is_skipped_with_one_warning_and_listed_by_doctor(tmp_db, tmp_path, capsys,
                                                                                    damage):
    db = open_store(tmp_db)
    save_winner(db, softmax_winner("python", time_ms=0.001))
    save_winner(db, softmax_winner("torch", time_ms=5.0))
    with sqlite3.connect(tmp_path / "tuning.sqlite") as con:
        con.execute(BAD_ROWS[damage])
    con.close()
    reset_lookup()
    with pytest.warns(RuntimeWarning, match="do not parse"):
        out = kernelzoo.ops.softmax(X)
    assert torch.allclose(out, torch.softmax(X, -1), atol=1e-6)
    expected = "default order" if damage == "empty device details" else "tuned (exact bucket"
    assert explain_softmax().reason.startswith(expected)
    if damage != "empty device details":
        assert explain_softmax().plugin == "torch"  # the row that parses
    forget_stores()
    assert cli.main(["show", "--db", tmp_db]) == 0
    capsys.readouterr()
    assert cli.main(["doctor", "--db", tmp_db]) == 0
    out = capsys.readouterr().out
    assert "bad rows" in out and "kz_winners row" in out


def test_a_stored_config_outside_the_plugins_space_never_reaches_the_plugin(tmp_db, capsys):
    """{"threads": 0} used to reach the OpenMP softmax and raise ZeroDivisionError."""
    save_winner(open_store(tmp_db), softmax_winner("openmp", config={"threads": 0}, time_ms=0.001))
    with pytest.warns(RuntimeWarning, match="threads=0 is not in softmax/openmp's space"):
        out = kernelzoo.ops.softmax(X)
    assert torch.allclose(out, torch.softmax(X, -1), atol=1e-6)
    with kernelzoo.use("openmp"):  # a forced plugin runs its default config then
        assert explain_softmax().config == registry.impl("softmax", "openmp").config()
    assert cli.main(["doctor", "--db", tmp_db]) == 0
    assert "threads=0 is not in softmax/openmp's space" in capsys.readouterr().out


# --- other people's files ------------------------------------------------------------------------------------


def foreign_sqlite(path: Path) -> Path:
    with sqlite3.connect(path) as con:
        con.execute("CREATE TABLE notes (id INTEGER PRIMARY KEY, body TEXT)")
        con.execute("INSERT INTO notes (body) VALUES ('mine')")
    con.close()
    return path


def journal_mode(path: Path) -> str:
    with sqlite3.connect(path) as con:
        mode = con.execute("PRAGMA journal_mode").fetchone()[0]
    con.close()
    return mode


@pytest.mark.timeout(300)
def test_another_applications_sqlite_file_is_refused_and_left_byte_identical(tmp_path, monkeypatch):
    path = foreign_sqlite(tmp_path / "app.sqlite")
    before = digest(path)
    one_line_error(kernelzoo_cli("show", "--db", str(path)), "another application's database", "notes")
    one_line_error(kernelzoo_cli("tune", "--op", "relu", "--device", "cpu", "--trials", "1", "--db", str(path)),
                   "another application's database")
    with pytest.raises(DatabaseError, match="another application's database"):
        open_store(str(path))
    monkeypatch.setenv("KERNELZOO_DB", str(path))
    reset_lookup()
    with pytest.warns(RuntimeWarning, match="another application's database"):
        assert torch.allclose(kernelzoo.ops.softmax(X), torch.softmax(X, -1), atol=1e-6)
    kernelzoo.db.flush_misses()
    forget_stores()
    assert digest(path) == before and journal_mode(path) == "delete"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["app.sqlite"]


@pytest.mark.timeout(120)
def test_a_file_that_is_not_a_database_is_never_renamed(tmp_path, monkeypatch):
    path = tmp_path / "notes.txt"
    path.write_text("my notes\n" * 100)
    before = digest(path)
    one_line_error(kernelzoo_cli("show", "--db", str(path)), "is not a SQLite database", "left it as it is")
    one_line_error(kernelzoo_cli("db", "export", "-", "--db", str(path)), "is not a SQLite database")
    monkeypatch.setenv("KERNELZOO_DB", str(path))
    reset_lookup()
    with pytest.warns(RuntimeWarning, match="is not a SQLite database"):
        kernelzoo.ops.softmax(X)
    with pytest.raises(DatabaseError, match="is not a SQLite database"):
        open_store(str(path), check=True)
    assert digest(path) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notes.txt"]


def _can_mount() -> bool:
    if shutil.which("unshare") is None:
        return False
    found = subprocess.run(["unshare", "-m", "mount", "-t", "tmpfs", "none", "/mnt"], capture_output=True)
    return found.returncode == 0


@pytest.mark.timeout(300)
@pytest.mark.skipif(not _can_mount(), reason="needs a private mount namespace (unshare -m) to mount read-only")
def test_a_database_on_a_read_only_mount_is_opened_read_only_and_its_winners_are_used(tmp_path):
    shared = tmp_path / "shared"
    shared.mkdir()
    db = shared / "tuning.sqlite"
    save_winner(open_store(str(db)), softmax_winner("python", time_ms=0.001))
    forget_stores()
    code = textwrap.dedent("""
        import json, torch, kernelzoo
        from kernelzoo import cli
        choice = kernelzoo.explain("softmax", torch.randn(64, 100))
        print(json.dumps([choice.plugin, choice.reason]))
        assert cli.main(["show", "--json"]) == 0
        """)
    script = (f"mount --bind {shared} {shared} && mount -o remount,bind,ro {shared} && "
              f"{sys.executable} -W error::RuntimeWarning -c '{code}'")
    done = subprocess.run(["unshare", "-m", "sh", "-c", script], capture_output=True, text=True, timeout=240,
                          env={**os.environ, "KERNELZOO_DB": str(db), "KERNELZOO_DB_WAIT_MS": "10000"})
    assert done.returncode == 0, done.stderr
    first, shown = done.stdout.split("\n", 1)
    plugin, reason = json.loads(first)
    assert plugin == "python" and reason.startswith("tuned (exact bucket"), reason
    assert [r["plugin"] for r in json.loads(shown)] == ["python"]
    tune = subprocess.run(["unshare", "-m", "sh", "-c", script.split(" && " + sys.executable)[0] + " && " +
                           f"{sys.executable} -m kernelzoo.cli tune --op relu --device cpu --trials 1"],
                          capture_output=True, text=True, timeout=240,
                          env={**os.environ, "KERNELZOO_DB": str(db), "KERNELZOO_DB_WAIT_MS": "10000"})
    one_line_error(tune, "read-only", "--db")


def test_a_plain_path_is_accepted_wherever_a_url_is(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert as_url("tune.sqlite") == f"sqlite:///{tmp_path / 'tune.sqlite'}"
    assert as_url("postgresql+psycopg://h/db") == "postgresql+psycopg://h/db"
    save_winner(open_store("tune.sqlite"), softmax_winner("python"))
    forget_stores()
    assert cli.main(["show", "--json", "--db", "tune.sqlite"]) == 0
    assert [r["plugin"] for r in json.loads(capsys.readouterr().out)] == ["python"]
    assert [w.plugin for w in winners(open_store(str(tmp_path / "tune.sqlite")))] == ["python"]


# --- the CLI: one line, what to do, no traceback ------------------------------------------------------------


@pytest.mark.timeout(300)
def test_the_cli_reports_each_database_fault_in_one_line(tmp_path):
    a_file = tmp_path / "plain-file"
    a_file.write_text("x")
    cases = {
        "parent is a file": (str(a_file / "tuning.sqlite"), "is a file, not a directory"),
        "parent not creatable": (str(a_file / "sub" / "tuning.sqlite"), "is a file, not a directory"),
        "not a database": (str(a_file), "is not a SQLite database"),
        "foreign": (str(foreign_sqlite(tmp_path / "app.sqlite")), "another application's database"),
        "bad url": ("nosuchdialect://x/y", "cannot open the tuning database"),
    }
    for name, (db, needle) in cases.items():
        for command in (["show"], ["doctor"], ["tune", "--op", "relu", "--device", "cpu", "--trials", "1"]):
            result = kernelzoo_cli(*command, "--db", db)
            if command == ["doctor"]:  # doctor reports the database among its other lines, and exits 1
                assert result.returncode == 1 and "Traceback" not in result.stderr, (name, result.stderr)
                assert needle in result.stdout, (name, result.stdout)
            else:
                one_line_error(result, needle)


# --- workers die with their tuner ----------------------------------------------------------------------------

TUNER = """
import sys
from kernelzoo.db.store import open_store
from kernelzoo.fingerprint import cpu_fingerprint
from kernelzoo.registry import registry
from kernelzoo.tuner.pool import WorkerPool
from kernelzoo.tuner.search import Target, TuneOptions, search

registry.load()
store = open_store(sys.argv[1])
trials = int(sys.argv[2])  # 0: open the study only
with WorkerPool(600) as pool:
    call = {"op": "kz_toy", "plugin": "planted", "device": "cpu", "dtype": "float32", "shape": [64], "params": {}}
    found = pool.request("planted", "cpu", {"cmd": "describe", **call})
    target = Target(op="kz_toy", plugin="planted", device="cpu", dtype="float32", shape=(64,), params={},
                    fingerprint=cpu_fingerprint(), source_hash=found["source_hash"], bucket=tuple(found["bucket"]),
                    flags=found["flags"], shape_text=found["shape_text"], config_space={"mode": ["hang", "ok"]},
                    default_config={"mode": "hang"})
    print("worker", pool._workers[("planted", "cpu")].proc.pid, flush=True)
    result = search(store, pool, target, TuneOptions(trials=trials, timeout_s=600, budget_ms=5, calibrate=False))
    print("done", result.ok, flush=True)
"""


def _gone(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] == "Z"
    except FileNotFoundError:
        return True


@pytest.mark.timeout(300)
def test_a_sigkilled_tuner_leaves_no_worker_and_its_trial_is_failed_at_the_next_start(tmp_db, tmp_path, monkeypatch):
    import optuna
    from optuna.trial import TrialState
    from tuning_helpers import planted_toys

    from kernelzoo.tuner.search import optuna_storage

    with planted_toys(monkeypatch):
        script = tmp_path / "tuner.py"
        script.write_text(TUNER)
        tuner = subprocess.Popen([sys.executable, str(script), tmp_db, "1"], stdout=subprocess.PIPE, text=True)
        try:
            line = tuner.stdout.readline().split()
            assert line[0] == "worker", line
            worker = int(line[1])
            storage = optuna_storage(tmp_db)
            deadline = time.monotonic() + 120
            running = []
            while not running and time.monotonic() < deadline:
                time.sleep(0.2)
                running = [t for s in optuna.get_all_study_summaries(storage)
                           for t in optuna.load_study(study_name=s.study_name, storage=storage).get_trials(
                               states=(TrialState.RUNNING,)) if "tuner" in t.user_attrs]
            assert running, "the tuner never started its trial"
            time.sleep(1.0)  # the worker is in the hanging config now
            tuner.kill()
            tuner.wait()
            deadline = time.monotonic() + 5
            while not _gone(worker) and time.monotonic() < deadline:
                time.sleep(0.1)
            assert _gone(worker), "the trial worker outlived its SIGKILLed tuner"
        finally:
            tuner.kill()
            tuner.wait()
            with contextlib.suppress(ProcessLookupError):
                os.kill(worker, 9)
        study_name = optuna.get_all_study_summaries(storage)[0].study_name
        (trial,) = optuna.load_study(study_name=study_name, storage=storage).get_trials()
        assert trial.state == TrialState.RUNNING  # as the killed tuner left it
        again = subprocess.run([sys.executable, str(script), tmp_db, "0"], capture_output=True, text=True,
                               timeout=240)
        assert again.returncode == 0 and "done 0" in again.stdout, again.stderr
        states = [t.state for t in optuna.load_study(study_name=study_name, storage=storage).get_trials()]
        assert states == [TrialState.FAIL]


# --- load-aware timing ---------------------------------------------------------------------------------------


def test_a_timing_is_busy_when_its_thread_waited_for_a_cpu_most_of_the_time():
    from kernelzoo.timing import Load

    assert Load(cores=2, loadavg=4.0, share=0.05, waited=0.95, slices_per_run=3.0).busy("cpu").startswith(
        "the host was busy")
    # as long a wait, in a few slices over many runs: the median run held none of it
    assert Load(cores=2, loadavg=4.0, share=0.05, waited=0.95, slices_per_run=0.02).busy("cpu") is None
    assert Load(cores=2, loadavg=4.0, share=0.02, waited=0.01).busy("cpu") is None  # a kernel that sleeps
    assert Load(cores=2, loadavg=0.1, share=0.05, pressure=0.95).busy("cpu") is not None  # no schedstat
    assert Load(cores=2, loadavg=0.1, share=0.1, pressure=0.05).busy("cpu") is None
    assert "1 other process(es) used the GPU" in Load(cores=2, loadavg=0.0, gpu_others=1).busy("cuda")
    assert Load(cores=2, loadavg=9.0, waited=0.99, gpu_others=0).busy("cuda") is None


SPIN = "import time\nend = time.time() + 90\nwhile time.time() < end: pass\n"


@pytest.mark.timeout(400)
def test_a_trial_timed_on_a_busy_host_is_marked_not_stored_and_measured_again_later(tmp_db, monkeypatch):
    """Bounded spinning children keep every core busy many times over: the timing under them is marked busy,
    no winner is stored, and the next run, on a quieter host, measures the config again and stores it."""
    import optuna
    from optuna.trial import TrialState
    from tuning_helpers import planted_toys

    from kernelzoo.tuner.pool import WorkerPool
    from kernelzoo.tuner.progress import Progress
    from kernelzoo.tuner.search import TuneOptions, optuna_storage
    from kernelzoo.tuner.tune import tune_op

    class Notes(Progress):
        def __init__(self) -> None:
            super().__init__(enabled=False)
            self.lines: list[str] = []

        def note(self, text: str) -> None:
            self.lines.append(text)

    options = TuneOptions(trials=1, timeout_s=120, budget_ms=100, warmup=1, calibrate=False)
    with planted_toys(monkeypatch), WorkerPool(120, busy_retries=1, busy_wait_s=0.2) as pool:
        store = open_store(tmp_db)
        pool.start(["python"], "cpu")
        pool.hello("python", "cpu")  # the worker's imports done before the load starts
        # 32 spinners a core leave the timing thread about 1/33 of a core, waiting ~97 % of the time, well past
        # Load.busy's 90 % (12 a core left ~92 %, which a scheduler's uneven shares could bring under it)
        spinners = [subprocess.Popen([sys.executable, "-c", SPIN]) for _ in range(32 * (os.cpu_count() or 1))]
        try:
            time.sleep(5.0)  # every spinner started
            notes = Notes()
            (report,) = tune_op(store, pool, "kz_toy", device="cpu", plugins=["python"], shapes=[(1_000_000,)],
                                dtypes=["float32"], options=options, progress=notes)
        finally:
            for spinner in spinners:
                spinner.kill()
            for spinner in spinners:
                spinner.wait()
        storage = optuna_storage(tmp_db)
        (summary,) = optuna.get_all_study_summaries(storage)
        trials = optuna.load_study(study_name=summary.study_name, storage=storage).get_trials()
        assert report.winner is None and winners(store, op="kz_toy") == [], [t.user_attrs for t in trials]
        assert any("timed while the machine was busy" in line for line in notes.lines), notes.lines
        assert trials and all("busy" in t.user_attrs and t.state == TrialState.FAIL for t in trials)
        time.sleep(1.0)
        (again,) = tune_op(store, pool, "kz_toy", device="cpu", plugins=["python"], shapes=[(1_000_000,)],
                           dtypes=["float32"], options=options)
    assert again.winner == "python" and [w.plugin for w in winners(store, op="kz_toy")] == ["python"]


def test_the_two_fastest_winners_are_timed_again_interleaved_before_they_are_stored():
    from kernelzoo.timing import Timing
    from kernelzoo.tuner.leaders import retime_leaders
    from kernelzoo.tuner.pool import TrialResult
    from kernelzoo.tuner.search import SearchResult, Target, TuneOptions

    class Pool:
        def __init__(self) -> None:
            self.asked: list[str] = []

        def trial(self, plugin: str, device: str, msg: dict) -> TrialResult:
            self.asked.append(plugin)
            times = {"a": (2.0, 2.0, 2.0, 2.0), "b": (1.0, 1.0, 1.0, 1.0)}[plugin]
            return TrialResult(Timing(times))

    def result(plugin: str, time_ms: float) -> SearchResult:
        target = Target(op="relu", plugin=plugin, device="cpu", dtype="float32", shape=(8,), params={},
                        fingerprint=cpu_fingerprint(), source_hash="x", bucket=(3,), flags="", shape_text="8",
                        config_space={})
        w = Winner(op="relu", plugin=plugin, source_hash="x", device=cpu_fingerprint(), dtype="float32", bucket=(3,),
                   flags="", config={}, time_ms=time_ms, spread=0.01)
        return SearchResult(target, w)

    pool = Pool()
    found = [result("a", 1.0), result("b", 1.1), result("c", 3.0)]
    assert retime_leaders(pool, found, TuneOptions()) == ({}, [])  # nothing measured in this run: nothing to do
    assert pool.asked == []
    found[1].measured = 1
    retimed, notes = retime_leaders(pool, found, TuneOptions())
    assert notes == [] and pool.asked == ["a", "b", "b", "a"]  # the third is not re-timed
    assert {plugin: w.time_ms for plugin, w in retimed.items()} == {"a": 2.0, "b": 1.0}  # b is the faster after all


def test_only_the_running_trials_of_a_tuner_that_is_gone_are_failed():
    import socket

    import optuna
    from optuna.trial import TrialState

    from kernelzoo.tuner.pool import TUNER_ATTR, fail_interrupted_trials

    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    study = optuna.create_study()
    owners = {"live": f"{socket.gethostname()}:{os.getpid()}", "gone": f"{socket.gethostname()}:{gone.pid}",
              "elsewhere": f"another-host-{socket.gethostname()}:{gone.pid}", "unnamed": None}
    trials = {}
    for name, owner in owners.items():
        trials[name] = study.ask()
        if owner is not None:
            trials[name].set_user_attr(TUNER_ATTR, owner)
    assert fail_interrupted_trials(study) == 1
    states = {t.number: t.state for t in study.get_trials()}
    assert {name: states[t.number] for name, t in trials.items()} == {
        "live": TrialState.RUNNING, "gone": TrialState.FAIL, "elsewhere": TrialState.RUNNING,
        "unnamed": TrialState.RUNNING}
