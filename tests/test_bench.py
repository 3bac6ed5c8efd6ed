"""`kernelzoo bench` (table, JSON, plot, floors, --calibrate) and the pytest-benchmark harness in benchmarks/."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from collections import defaultdict
from dataclasses import fields

import pytest
import torch
from tuning_helpers import ROOT, load_file, temporary_db

from kernelzoo.bench.cases import cases
from kernelzoo.bench.run import Row
from kernelzoo.ceilings import Ceilings
from kernelzoo.cli import main
from kernelzoo.db.records import device_ceilings, save_device_ceilings
from kernelzoo.db.store import open_store
from kernelzoo.fingerprint import cpu_fingerprint
from kernelzoo.registry import registry

BENCHMARKS = ROOT / "benchmarks"
PLANTED = {"bandwidth_gbs": 10.0, "tflops": {"float32": 0.1}, "source": "planted by the test"}


@pytest.fixture
def tmp_db(tmp_path, monkeypatch):
    """A new database (the default for this test and its subprocesses) holding planted CPU ceilings."""
    with temporary_db(tmp_path, monkeypatch) as url:
        save_device_ceilings(open_store(url), cpu_fingerprint(), PLANTED)
        yield url


def test_bench_prints_tables_and_writes_json_rows_and_a_plot(tmp_db, tmp_path, capsys):
    out_json, out_png = tmp_path / "relu.json", tmp_path / "relu.png"
    assert main(["bench", "--op", "relu", "--device", "cpu", "--shape", "256x256", "--shape", "64x1024", "--dtype",
                 "float32", "--budget-ms", "5", "--output", str(out_json), "--plot", str(out_png)]) == 0
    out = capsys.readouterr().out
    assert "vs torch" in out and "% floor" in out and "dispatch: " in out
    data = json.loads(out_json.read_text())
    assert {"device", "versions", "date", "command", "ceilings", "cores", "load"} <= set(data["meta"])
    assert data["meta"]["ceilings"]["source"] == "planted by the test"
    rows = [Row(**r) for r in data["rows"]]  # every documented key, no other
    assert {r.shape for r in rows} == {"256x256", "64x1024"}
    assert set(data["rows"][0]) == {f.name for f in fields(Row)}
    ceilings = Ceilings(PLANTED["bandwidth_gbs"], PLANTED["tflops"], PLANTED["source"])
    for r in rows:
        assert r.floor_ms == pytest.approx(ceilings.floor_ms(r.flops, r.bytes, r.dtype))
        assert r.bytes == 2 * 4 * 256 * 256  # relu reads and writes each float once
        if r.status == "ok":
            assert r.median_ms > 0 and r.runs >= 3 and r.dispatch
            assert r.pct_of_floor == pytest.approx(100 * r.floor_ms / r.median_ms)
            assert r.gbs == pytest.approx(r.bytes / r.median_ms / 1e6)
    assert next(r for r in rows if r.plugin == "torch").vs_torch == pytest.approx(1.0)
    png = out_png.read_bytes()
    assert png.startswith(b"\x89PNG") and len(png) > 10_000
    perf_docs = load_file(ROOT / "scripts" / "perf_docs.py")  # the pages of these results
    assert perf_docs.main(["--cpu", str(tmp_path), "--docs", str(tmp_path / "docs")]) == 0
    page = (tmp_path / "docs" / "relu.md").read_text()
    assert "## CPU, " in page and "(img/relu-cpu.png)" in page
    assert "| float32 | 256x256 | torch * |" in page  # starred: relu's untuned CPU order runs torch
    assert (tmp_path / "docs" / "img" / "relu-cpu.png").read_bytes() == png
    assert "[relu](relu.md)" in (tmp_path / "docs" / "README.md").read_text()
    # a hand note for the section goes under its heading, and a rebuild without an import keeps it
    (tmp_path / "docs" / "notes").mkdir()
    (tmp_path / "docs" / "notes" / "relu-cpu.md").write_text("Measured before the change of 2026-11-27.\n")
    assert perf_docs.main(["--docs", str(tmp_path / "docs")]) == 0
    page = (tmp_path / "docs" / "relu.md").read_text()
    heading = page.index("## CPU, ")
    assert heading < page.index("Measured before the change of 2026-11-27.") < page.index("Measured 20", heading + 1)
    assert "| float32 | 256x256 | torch * |" in page


def test_perf_pages_star_what_the_current_default_order_runs():
    """A table measured untuned before an op's own default order changed stars the plugin that order runs
    now, and says so; a tuned run's choice stays starred as recorded."""
    perf_docs = load_file(ROOT / "scripts" / "perf_docs.py")

    def row(plugin: str, reason: str, shape: str = "64x64x64") -> Row:
        return Row(op="linear", plugin=plugin, dtype="bfloat16", shape=shape, label=shape, params={}, device="cuda",
                   status="ok", median_ms=1.0, dispatch="triton", dispatch_reason=reason)

    untuned = [row("triton", "default order"), row("torch", "default order")]
    assert "| triton |" in perf_docs.table(untuned) and "| torch * |" in perf_docs.table(untuned)
    assert "torch (the run's dispatch: triton)" in perf_docs.changed_picks(untuned)
    tuned = [row("triton", "tuned"), row("torch", "tuned")]
    assert "| triton * |" in perf_docs.table(tuned) and perf_docs.changed_picks(tuned) is None


def test_calibrate_stores_the_device_ceilings(tmp_path, monkeypatch, capsys):
    with temporary_db(tmp_path, monkeypatch) as url:
        assert main(["bench", "--calibrate", "--device", "cpu"]) == 0
        assert "calibrated" in capsys.readouterr().out
        stored = device_ceilings(open_store(url), cpu_fingerprint())
        assert stored["bandwidth_gbs"] > 0 and stored["tflops"]["float32"] > 0
        assert stored["source"].startswith("measured calibration")


def test_the_help_texts_format(capsys):
    for argv in (["--help"], ["bench", "--help"]):
        with pytest.raises(SystemExit) as done:
            main(argv)
        assert done.value.code == 0
    assert "% of the floor" in capsys.readouterr().out


def test_several_ops_need_a_path_per_op(capsys):
    assert main(["bench", "--op", "relu", "--op", "gelu", "--output", "out.json"]) == 2
    assert "must contain {op}" in capsys.readouterr().err


def _bench_ops() -> set[str]:
    found = set()
    for path in BENCHMARKS.glob("bench_*.py"):
        match = re.search(r"^OPS = \((.*)\)$", path.read_text(), re.MULTILINE)
        if match:
            found |= {name.strip().strip('"') for name in match.group(1).split(",") if name.strip()}
    return found


def test_every_op_has_a_benchmark_file():
    missing = set(registry.load().ops) - _bench_ops()
    assert not missing, f"add these ops to a benchmarks/bench_<op>.py (OPS = (...)): {sorted(missing)}"


def test_the_benchmarks_are_the_cases_of_their_ops():
    done = subprocess.run([sys.executable, "-m", "pytest", "benchmarks", "--collect-only", "-q", "-p",
                           "no:cacheprovider", "--bench-device", "cpu"], capture_output=True, text=True,
                          cwd=ROOT, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    ids = re.findall(r"\[(.+)\]$", done.stdout, re.MULTILINE)
    assert sorted(ids) == sorted(str(c) for op in _bench_ops() for c in cases(op, "cpu"))
    assert "softmax-torch-float32-2048x2048" in ids


@pytest.mark.parametrize("device", ["cpu", "cuda"])
def test_every_group_has_a_torch_row(device):
    groups = defaultdict(set)
    for op in _bench_ops() & set(registry.load().ops):
        for case in cases(op, device):
            groups[case.group].add(case.plugin)
    assert groups and all("torch" in plugins for plugins in groups.values())


def test_the_benchmarks_run_once_as_tests(tmp_db):
    done = subprocess.run([sys.executable, "-m", "pytest", "benchmarks/bench_relu.py", "--benchmark-disable", "-q",
                           "-p", "no:cacheprovider"], capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    assert re.search(r"\d+ passed", done.stdout)


class _FakeEvent:
    """torch.cuda.Event on the CPU clock: what a GPU timeline would show if kernels ran as they are called."""

    def __init__(self, enable_timing: bool = False) -> None:
        self.t = 0.0

    def record(self) -> None:
        self.t = time.perf_counter()

    def synchronize(self) -> None:
        pass

    def elapsed_time(self, end: _FakeEvent) -> float:
        return (end.t - self.t) * 1e3


def test_the_cuda_event_timer_is_read_in_pairs_around_the_call(monkeypatch):
    sys.path.insert(0, str(BENCHMARKS))
    try:
        import harness
    finally:
        sys.path.remove(str(BENCHMARKS))
    monkeypatch.setattr(torch.cuda, "Event", _FakeEvent)
    for _ in range(2):  # as pytest-benchmark's runner: start = timer(); call; duration = timer() - start
        time.sleep(0.02)  # the round's setup: not timed
        start = harness.cuda_event_timer()
        time.sleep(0.005)
        duration = harness.cuda_event_timer() - start
        assert 0.004 < duration < 0.015


def test_the_gelu_fusion_study_writes_its_tables(tmp_db, tmp_path):
    study = load_file(ROOT / "examples" / "gelu_fusion.py")
    study.main(["--device", "cpu", "--cpu-size", "256x512", "--no-compile", "--out", str(tmp_path / "gelu.md")])
    text = (tmp_path / "gelu.md").read_text()
    assert "gelu (tanh) of 256x512 float32" in text
    assert re.search(r"\| torch fused: F.gelu\(approximate='tanh'\) \| [\d.]+ \| [\d.]+ \| \d+% \| 1.00x \|", text)
    assert "| torch.compile of the separate ops (skipped) |" in text and "floor: bytes / bandwidth" in text


def test_attention_bench_reports_the_targets_and_the_dispatch_misses():
    """scripts/attention_bench.py's targets(): per target the rows that meet it, the ratio's range and the misses
    (a ratio just under the bar is a miss, printed so that it reads as one); dispatch against the fastest of
    flash, triton and cuda, a miss saying whether dispatch ran that candidate."""
    bench = load_file(ROOT / "scripts" / "attention_bench.py")

    def row(shape: str, causal: bool, fwd: dict, bwd: dict, choice: dict) -> dict:
        return {"shape": shape, "causal": causal, "fwd_tflops": fwd, "bwd_tflops": bwd, "dispatch_choice": choice}

    rows = [row("4x32x4096x128", False,
                {"flash": 300.0, "cudnn": 560.0, "triton": 503.0, "cuda": 600.0, "dispatch": 587.0},
                {"flash": 270.0, "cudnn": 500.0, "triton": 400.0, "cuda": 390.0, "dispatch": 380.0},
                {"fwd": "cuda", "bwd": "cuda"}),
            row("4x32x1024x64", True,
                {"flash": 180.0, "cudnn": 280.0, "triton": 150.0, "cuda": 270.0, "dispatch": 270.0},
                {"flash": 135.0, "cudnn": 210.0, "triton": 130.0, "cuda": 187.0, "dispatch": 105.0},
                {"fwd": "cuda", "bwd": "triton"})]
    lines = {line.split(" | ")[0].lstrip("| "): line for line in bench.targets(rows).splitlines()[2:]}
    # 587 / 560 = 1.048: under 1.05, and printed with three digits; N = 1024 rows are not held to it
    assert "| 0 of 1 | 1.048–1.048× | 4x32x4096x128 fwd 1.048× |" in lines["dispatch forward ≥ 1.05× cuDNN, N ≥ 4096"]
    assert "| 0 of 1 |" in lines["dispatch backward ≥ 1.0× cuDNN, N ≥ 4096"]
    assert "4x32x4096x128 bwd 0.760×" in lines["dispatch backward ≥ 1.0× cuDNN, N ≥ 4096"]
    assert "| 1 of 2 |" in lines["Triton forward ≥ 1.0× FA2"] and "4x32x1024x64 causal fwd 0.833×" in \
        lines["Triton forward ≥ 1.0× FA2"]
    dispatch = lines["dispatch within 3% of the fastest of flash, triton, cuda"]
    # 587 / 600 is within 3 %; 380 / 400 is not, and dispatch ran cuda where triton was fastest; 105 / 187: it
    # ran triton, cuda was fastest
    assert "| 2 of 4 |" in dispatch
    assert "4x32x4096x128 bwd 0.950× of triton (ran cuda)" in dispatch
    assert "4x32x1024x64 causal bwd 0.561× of cuda (ran triton)" in dispatch
    same = [dict(r, dispatch_choice={"fwd": "cuda", "bwd": "triton"}) for r in rows[:1]]
    assert "0.950× of triton (ran it)" in bench.targets(same)


def test_attention_bench_fp8_table_gives_the_ratio_to_cudnn_and_the_fast_path_s_verdict():
    bench = load_file(ROOT / "scripts" / "attention_bench.py")
    configs = {"triton PV_FP8=0": {}, "triton PV_FP8=1": {}}
    rows = [{"shape": "4x32x4096x128", "causal": True, "dispatch_choice": "triton", "configs": {**configs, "cuda": {}},
             "tflops": {"cudnn fp16": 500.0, "triton PV_FP8=0": 450.0, "triton PV_FP8=1": 600.0, "cuda": 560.0,
                        "dispatch": 449.0},
             "verdicts": {"triton PV_FP8=0": "meets the tolerance", "triton PV_FP8=1": "misses it: o",
                          "cuda": "meets the tolerance"}},
            # no cuda candidate (a GPU without the plugin's FP8 product), nothing checked (past the verify limit)
            {"shape": "1x32x16384x128", "causal": False, "dispatch_choice": "torch", "verdicts": {}, "configs": configs,
             "tflops": {"cudnn fp16": 600.0, "triton PV_FP8=0": 660.0, "triton PV_FP8=1": 700.0, "dispatch": 580.0}}]
    lines = bench.fp8_table(rows).splitlines()
    assert lines[2] == ("| 4x32x4096x128 | yes | 500 | 450 | 600 | 560 | 449 (triton) | 0.90× | 1.12× "
                        "| meets the tolerance | misses it: o |")
    assert lines[3] == "| 1x32x16384x128 | no | 600 | 660 | 700 | – | 580 (torch) | 1.10× | – | – | not checked |"
