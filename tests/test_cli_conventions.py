"""The command line's conventions, as a user meets them: --version, exit codes (0 ok, 1 runtime error, 2 usage
error, 3 keys without a verified winner), one line and no traceback for expected failures, did-you-mean, --json
on stdout for every reporting command, plain paths for the database, honest % floor figures."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys

import pytest
import torch
from tuning_helpers import TESTS, kernelzoo_cli, reset_lookup, temporary_db

import kernelzoo
from kernelzoo.calibrate import load_note, measure
from kernelzoo.cli import main
from kernelzoo.db import as_url, default_url
from kernelzoo.db.records import save_device_ceilings
from kernelzoo.db.store import open_store
from kernelzoo.fingerprint import cpu_fingerprint
from kernelzoo.registry import registry

FAST = ("--device", "cpu", "--dtype", "float32", "--budget-ms", "5", "--trials", "2", "--quiet")
NO_CUDA = pytest.mark.skipif(torch.cuda.is_available(), reason="checks the messages of a machine without CUDA")


@pytest.fixture
def tmp_db(tmp_path, monkeypatch):
    """A new SQLite database, the default for this test and its subprocesses, with planted CPU ceilings."""
    with temporary_db(tmp_path, monkeypatch) as url:
        save_device_ceilings(open_store(url), cpu_fingerprint(), {"bandwidth_gbs": 10.0, "tflops": {"float32": 0.1},
                                                                  "source": "planted by the test"})
        yield url


def _no_traceback(done: subprocess.CompletedProcess) -> str:
    assert "Traceback" not in done.stderr, done.stderr
    return done.stderr


def test_version_and_the_exit_codes_in_help(capsys):
    with pytest.raises(SystemExit) as done:
        main(["--version"])
    assert done.value.code == 0
    assert capsys.readouterr().out.strip() == f"kernelzoo {kernelzoo.__version__}"
    with pytest.raises(SystemExit):
        main(["--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "0 ok, 1 runtime error" in text and "2 usage error" in text
    assert "3 some keys ended without a verified winner" in text


@pytest.mark.parametrize(("argv", "suggestion"), [
    (["list", "--op", "rleu"], "did you mean 'relu'?"),
    (["show", "--op", "sofmax"], "did you mean 'softmax'?"),
    (["demo", "--op", "nosuch"], "unknown op 'nosuch'"),
    (["tune", "--op", "rleu", "--device", "cpu"], "did you mean 'relu'?"),
    (["tune", "--op", "relu", "--plugin", "opnemp", "--device", "cpu"], "did you mean 'openmp'?"),
    (["bench", "--op", "gleu", "--device", "cpu"], "did you mean 'gelu'?"),
])
def test_a_misspelt_op_or_plugin_is_a_usage_error_with_a_suggestion(argv, suggestion, tmp_db, capsys):
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert suggestion in err and err.count("\n") == 1, err


def test_a_plugin_that_cannot_run_here_is_a_runtime_error_in_one_line(tmp_db):
    done = kernelzoo_cli("tune", "--op", "relu", "--plugin", "cuda", *FAST)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "plugin cuda runs on cuda, not on cpu" in _no_traceback(done)


@NO_CUDA
@pytest.mark.parametrize("command", [["tune", "--op", "relu"], ["demo"], ["bench", "--op", "relu"]])
def test_device_cuda_without_cuda_says_so_without_a_traceback(command):
    done = kernelzoo_cli(*command, "--device", "cuda")
    assert done.returncode == 1
    err = _no_traceback(done)
    assert "--device cuda" in err and "--device cpu" in err and err.count("\n") == 1, err


def test_a_closed_pipe_ends_quietly():
    # `kernelzoo list --json | head`: the reader has gone (here before the first line) while the command writes
    proc = subprocess.Popen([sys.executable, "-m", "kernelzoo.cli", "list", "--json"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE)
    proc.stdout.close()
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=120) == 141  # 128 + SIGPIPE, as a shell's own tools end
    assert "Traceback" not in err and "BrokenPipe" not in err, err


def test_a_plain_path_is_accepted_where_a_url_is(tmp_path, monkeypatch):
    path = tmp_path / "sub dir" / "mine.sqlite"
    path.parent.mkdir()
    assert as_url(str(path)) == f"sqlite:///{path}"
    assert as_url("postgresql://u@host/db") == "postgresql://u@host/db"
    assert as_url("sqlite:///x.sqlite") == "sqlite:///x.sqlite"
    monkeypatch.chdir(tmp_path)
    assert as_url("rel.sqlite") == f"sqlite:///{tmp_path / 'rel.sqlite'}"
    monkeypatch.setenv("KERNELZOO_DB", str(path))
    assert default_url() == f"sqlite:///{path}"
    done = kernelzoo_cli("show", "--json", "--db", str(path))
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == [] and path.exists()


def test_every_reporting_command_writes_json_to_stdout(tmp_db):
    found = {}
    for name, argv in {
        "list": ["list", "--op", "relu", "--json"],
        "doctor": ["doctor", "--json"],
        "tune": ["tune", "--op", "relu", "--plugin", "torch", "--shape", "64x64", *FAST, "--json"],
        "show": ["show", "--op", "relu", "--json"],
        "bench": ["bench", "--op", "relu", "--plugin", "torch", "--shape", "64x64", "--device", "cpu", "--dtype",
                  "float32", "--budget-ms", "5", "--json"],
    }.items():
        done = kernelzoo_cli(*argv)
        assert done.returncode == 0, (name, done.stderr)
        found[name] = json.loads(done.stdout)  # nothing but the JSON on stdout
    assert {r["plugin"] for r in found["list"]} >= {"python", "torch"}
    assert any(line["name"] == "database" and line["ok"] for line in found["doctor"])
    (key,) = found["tune"]["keys"]
    assert found["tune"]["ok"] and key["winner"] == "torch" and key["shape"] == "64x64"
    assert key["plugins"][0]["time_ms"] > 0
    assert [r["plugin"] for r in found["show"]] == ["torch"]
    assert {r["plugin"] for r in found["bench"]["rows"]} == {"torch"} and found["bench"]["meta"]["device"]


def test_tune_exits_3_when_a_key_ends_without_a_verified_winner(tmp_db, monkeypatch):
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(TESTS), os.environ.get("PYTHONPATH")])))
    done = kernelzoo_cli("tune", "--op", "kz_never", *FAST, env={"KERNELZOO_EXTRA_PLUGINS": "surface_toys"})
    assert done.returncode == 3, done.stdout + done.stderr
    _no_traceback(done)
    assert "0 key(s) with a verified winner, 1 without" in done.stdout
    assert "kz_never float32 64" in done.stdout and "none" in done.stdout


def test_a_time_under_the_floor_is_flagged_with_a_hint_to_recalibrate(tmp_db):
    # ceilings planted far too low: every time is "faster than the floor", as after a calibration under load
    save_device_ceilings(open_store(tmp_db), cpu_fingerprint(), {"bandwidth_gbs": 1e-4, "tflops": {"float32": 1e-6},
                                                                 "source": "planted too low"})
    reset_lookup()
    done = kernelzoo_cli("tune", "--op", "relu", "--plugin", "torch", "--shape", "64x64", *FAST)
    assert done.returncode == 0, done.stderr
    (row,) = [line for line in done.stdout.splitlines() if line.startswith("relu float32 64x64")]
    assert "%!" in row
    assert "kernelzoo bench --calibrate" in done.stdout


def test_a_calibration_records_its_noise_and_the_load():
    found = measure("cpu", budget_ms=5)
    assert set(found["noise"]) == {"copy", "float32"} and all(v >= 0 for v in found["noise"].values())
    assert found["cores"] >= 1
    if hasattr(os, "getloadavg"):
        assert len(found["load"]) == 2
    assert load_note([3.0], 2).startswith("the machine was busy (load average 3.0 on 2 cores)")
    assert load_note([0.4], 2) == ""


def test_plot_without_matplotlib_fails_before_measuring(tmp_db, monkeypatch, capsys):
    import kernelzoo.bench.run

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "matplotlib" else real(name, *a))
    monkeypatch.setattr(kernelzoo.bench.run, "bench_groups", lambda *a, **k: pytest.fail("measured before the check"))
    assert main(["bench", "--op", "relu", "--device", "cpu", "--plot", "out.png"]) == 1
    assert "pip install matplotlib" in capsys.readouterr().err


def test_every_reporting_command_has_json_and_every_database_option_takes_a_path():
    from kernelzoo.cli import parser

    sub = next(a for a in parser()._actions if a.dest == "command")
    for name in ("list", "show", "tune", "doctor", "bench", "demo"):
        options = {o for a in sub.choices[name]._actions for o in a.option_strings}
        assert "--json" in options, name
    for name, command in sub.choices.items():
        for action in command._actions:
            if "--db" in action.option_strings:
                assert action.type is as_url, name
    assert registry.load().ops  # the parser imported every command module
