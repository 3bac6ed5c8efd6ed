"""What ``tune --verify`` and ``--stale`` run, counted with toy plugins that compile (tests/verify_toys.py): the
plugins and configs re-timed per key, the checks against the reference, the re-times of close leaders, the
compiles (once per kernel, done side by side before any timing), the budget and a progress line per key."""

from __future__ import annotations

import io
import json
import os
from dataclasses import replace
from pathlib import Path

import pytest
import torch
import verify_toys
from tuning_helpers import ROOT, TESTS, load_file, temporary_db

from kernelzoo.db import lifecycle, shipped
from kernelzoo.db.models import Origin
from kernelzoo.db.records import Winner, save_winner, winners
from kernelzoo.db.store import open_store
from kernelzoo.errors import ArgumentError
from kernelzoo.fingerprint import Fingerprint
from kernelzoo.registry import registry
from kernelzoo.timing import Timing
from kernelzoo.tuner import leaders, missing, retime, warm
from kernelzoo.tuner.pool import TrialResult, WorkerPool
from kernelzoo.tuner.progress import Progress
from kernelzoo.tuner.search import SearchResult, Target, TuneOptions

OPTIONS = TuneOptions(trials=20, timeout_s=30.0, budget_ms=2, warmup=1, calibrate=False)
OP = "kz_verify"


def gpu(name: str, sm_count: int = 132) -> Fingerprint:
    return Fingerprint(kind="cuda", name=name, capability="9.0", sm_count=sm_count, driver="580.0, CUDA 13.0",
                       cuda="13.0", nvrtc="13.0", triton="3.6.0")


H200, NVL = gpu("NVIDIA H200"), gpu("NVIDIA H100 NVL")


class CountingPool(WorkerPool):
    """A worker pool that lists every trial it runs: (plugin, size, config, checked against the reference), and
    its dtype."""

    def __init__(self) -> None:
        super().__init__(OPTIONS.timeout_s)
        self.trials: list[tuple[str, int, dict, bool]] = []
        self.dtypes: list[str] = []

    def trial(self, plugin: str, device: str, msg: dict) -> TrialResult:
        self.trials.append((plugin, msg["shape"][0], dict(msg["config"]), msg.get("check", True)))
        self.dtypes.append(msg["dtype"])
        return super().trial(plugin, device, msg)

    def pids(self) -> set[int]:
        return {w.proc.pid for w in self._workers.values()}


@pytest.fixture
def toys(tmp_path, monkeypatch):
    (tmp_path / "shipped").mkdir()
    (tmp_path / "kernels").mkdir()
    monkeypatch.setattr(shipped, "shipped_dir", lambda: tmp_path / "shipped")
    monkeypatch.setenv("KZ_VERIFY_CACHE", str(tmp_path / "kernels"))
    monkeypatch.setenv("PYTHONPATH", str(TESTS))
    monkeypatch.setenv("KERNELZOO_EXTRA_PLUGINS", "verify_toys")
    monkeypatch.setattr(retime, "device_fingerprint", lambda pool, device: NVL)
    registry.load().register_module(verify_toys)
    verify_toys.compiled.cache_clear()
    with temporary_db(tmp_path, monkeypatch) as url:
        try:
            yield open_store(url)
        finally:
            registry.ops.pop(OP, None)
            registry.impls.pop(OP, None)


def compiles(tmp_path: Path) -> list[tuple[str, int]]:
    """The compiles logged so far: (kernel, process id)."""
    log = tmp_path / "kernels" / "compiles.log"
    lines = log.read_text().split() if log.exists() else []
    return [(line.rsplit("@", 1)[0], int(line.rsplit("@", 1)[1])) for line in lines]


def record(plugin: str, size: int, time_ms: float, block: int, fp: Fingerprint = H200,
           dtype: torch.dtype = torch.float32) -> Winner:
    """A winner of the toy op measured on ``fp``."""
    spec, impl = registry.op(OP), registry.impl(OP, plugin)
    call = spec.example((size,), dtype, "cpu")
    return Winner(op=OP, plugin=plugin, source_hash=impl.source_hash, device=fp,
                  dtype=str(dtype).removeprefix("torch."), bucket=tuple(spec.bucket(call)), flags=spec.flags(call),
                  config={"BLOCK": block}, time_ms=time_ms, spread=0.01, shape=spec.shape_string(call),
                  code_files=dict(impl.code_files))


def test_verify_retimes_the_close_plugins_of_each_key_and_compiles_each_kernel_once(toys, tmp_path):
    for size in (64, 1024):  # slow is 5x the fastest on the sibling: not re-timed
        for plugin, ms, block in (("fast", 1.0, 2), ("mid", 1.3, 4), ("slow", 5.0, 8)):
            save_winner(toys, record(plugin, size, ms, block))
    wanted = {lifecycle.provisional_keys(toys, NVL, OP)[i].bucket for i in range(6)}
    assert len(wanted) == 2
    stream = io.StringIO()
    with CountingPool() as pool:
        reports = retime.tune_verify(toys, pool, device="cpu", op=OP, options=OPTIONS, warmers=2,
                                     progress=Progress(stream=stream))
        timers = pool.pids()
    checked = sorted((p, n, c["BLOCK"]) for p, n, c, check in pool.trials if check)
    assert checked == [("fast", 64, 2), ("fast", 1024, 2), ("mid", 64, 4), ("mid", 1024, 4)], \
        "each key's records within 1.5x of its fastest, each checked against the reference once"
    retimes = [(p, n, c["BLOCK"]) for p, n, c, check in pool.trials if not check]
    assert set(retimes) <= set(checked) and len(retimes) <= 4 * 2, "re-times of the leaders only, not checked"
    logged = compiles(tmp_path)
    assert sorted(k for k, _ in logged) == ["fast-float32-2", "mid-float32-4"], "one compile per kernel"
    assert not {pid for _, pid in logged} & timers, "compiled by the warm-up workers, before the timing"
    own = winners(toys, op=OP, device_hash=NVL.hash)
    assert {w.bucket for w in own} == wanted and {w.origin for w in own} == {Origin.VERIFIED}
    assert {w.plugin for w in own} <= {"fast", "mid"} and len(reports) == 2
    assert lifecycle.provisional_keys(toys, NVL, OP) == []
    lines = [line for line in stream.getvalue().splitlines() if line.startswith("[")]
    assert len(lines) == 2 and all("2 config(s) of fast, mid" in line for line in lines), stream.getvalue()


def test_verify_takes_the_top_configs_round_the_plugins(toys):
    save_winner(toys, record("fast", 64, 1.0, 1))
    save_winner(toys, record("mid", 64, 1.2, 2))
    group = lifecycle.provisional_keys(toys, NVL, OP)
    picked = retime.verify_configs(toys, group, top=3, within=1.5)
    assert sorted((key[1], [c["BLOCK"] for c in configs]) for key, configs in picked.items()) == \
        [("fast", [1]), ("mid", [2])], "a shipped record brings its config alone"
    assert list(retime.verify_configs(toys, group, top=1, within=1.5).values()) == [[{"BLOCK": 1}]]
    assert [key[1] for key in retime.verify_configs(toys, group, top=3, within=1.1)] == ["fast"]


def test_the_budget_stops_starting_keys_and_a_rerun_verifies_the_rest(toys):
    for size in (64, 1024):
        save_winner(toys, record("fast", size, 1.0, 2))
    stream = io.StringIO()
    with CountingPool() as pool:
        first = retime.tune_verify(toys, pool, device="cpu", op=OP, options=OPTIONS, budget_s=1e-9,
                                   progress=Progress(stream=stream))
        assert first == [] and pool.trials == []
        assert "1e-09 s is spent: 2 key(s) left" in stream.getvalue()
        assert len(retime.tune_verify(toys, pool, device="cpu", op=OP, options=OPTIONS)) == 2
    assert lifecycle.provisional_keys(toys, NVL, OP) == []


def test_stale_retimes_each_stale_config_once_with_its_compile(toys, tmp_path):
    for size in (64, 1024):  # measured on code that has changed since
        save_winner(toys, replace(record("fast", size, 1.0, 2, fp=NVL), source_hash="f" * 16, code_files={}))
        save_winner(toys, replace(record("mid", size, 3.0, 4, fp=NVL), source_hash="f" * 16, code_files={}))
    with CountingPool() as pool:
        reports = retime.tune_stale(toys, pool, device="cpu", op=OP, options=OPTIONS)
    assert sorted((p, n, c["BLOCK"]) for p, n, c, check in pool.trials if check) == \
        [("fast", 64, 2), ("fast", 1024, 2), ("mid", 64, 4), ("mid", 1024, 4)]
    assert len(reports) == 2
    assert sorted(k for k, _ in compiles(tmp_path)) == ["fast-float32-2", "mid-float32-4"]


class FakePool:
    """Trials answered from a table of times per plugin, listed as they are asked for."""

    def __init__(self, times: dict[str, float]) -> None:
        self.times, self.asked = times, []

    def trial(self, plugin: str, device: str, msg: dict) -> TrialResult:
        self.asked.append((plugin, msg.get("check", True)))
        return TrialResult(Timing((self.times[plugin],) * 3))


def searched(plugin: str, time_ms: float) -> SearchResult:
    target = Target(op=OP, plugin=plugin, device="cpu", dtype="float32", shape=(64,), params={}, fingerprint=NVL,
                    source_hash="0" * 16, bucket=(6,), flags="", shape_text="64", config_space={"BLOCK": [1]})
    winner = Winner(op=OP, plugin=plugin, source_hash="0" * 16, device=NVL, dtype="float32", bucket=(6,), flags="",
                    config={"BLOCK": 1}, time_ms=time_ms, spread=0.01)
    return SearchResult(target, winner=winner, ok=1, measured=1)


@pytest.mark.parametrize(("second_ms", "clear", "retimed"), [(1.05, 0.15, 4), (1.5, 0.15, 0), (1.5, 0.0, 4)])
def test_the_leaders_are_retimed_unchecked_unless_the_first_is_clear(second_ms, clear, retimed):
    pool = FakePool({"a": 1.0, "b": second_ms})
    found, notes = leaders.retime_leaders(pool, [searched("a", 1.0), searched("b", second_ms)],
                                          TuneOptions(clear=clear))
    assert len(pool.asked) == retimed and notes == []
    assert all(check is False for _, check in pool.asked), "their configs were checked when measured"
    assert (found == {}) == (retimed == 0)


def test_warm_up_queues_keep_a_kernel_s_calls_together():
    tasks = [{"op": OP, "plugin": p, "dtype": "float32", "params": {}, "config": {"BLOCK": b}, "shape": [n]}
             for p in ("fast", "mid") for b in (1, 2) for n in (64, 1024)]
    queues = warm.plan(tasks, 3)
    assert len(queues) == 3 and sorted(map(len, queues)) == [2, 2, 4]
    for queue in queues:
        kernels = {(t["plugin"], t["config"]["BLOCK"]) for t in queue}
        assert all(sum(1 for t in queue if (t["plugin"], t["config"]["BLOCK"]) == k) == 2 for k in kernels)
    assert warm.warm(tasks, 30.0, warmers=1) == 0, "one queue is the timing worker's own work: no warm-up"


def write_file(path: Path, rows: list[Winner]) -> None:
    from kernelzoo.db.transfer import to_record

    path.write_text(json.dumps({"format": "kernelzoo-winners", "version": 2, "kernelzoo": "0", "exported_at": "",
                                "records": [to_record(w) for w in rows]}))


def test_a_shipped_file_of_this_gpu_s_hardware_is_its_own_whatever_its_driver(toys, tmp_path):
    newer = replace(H200, driver="590.0, CUDA 13.1", triton="3.7.0")  # another software stack, the same chip
    write_file(tmp_path / "shipped" / "h200.json", [record("fast", 64, 1.0, 2)])
    assert newer.hash != H200.hash
    assert lifecycle.provisional_keys(toys, newer, OP) == [], "nothing to verify: the file is this GPU's own"
    assert [w.plugin for w in lifecycle.provisional_keys(toys, NVL, OP)] == ["fast"]


def test_verify_sibling_relabels_a_file_and_verifies_every_key(toys, tmp_path, monkeypatch, capsys):
    from kernelzoo.tuner import tune

    script = load_file(ROOT / "scripts" / "verify_sibling.py")
    source = tmp_path / "h200.json"
    write_file(source, [record(p, n, ms, b) for n in (64, 1024) for p, ms, b in (("fast", 1.0, 2), ("mid", 9.0, 4))])
    monkeypatch.setattr(tune, "device_fingerprint", lambda pool, device: NVL)
    for name in ("KERNELZOO_DB", "KERNELZOO_CACHE_DIR", "TRITON_CACHE_DIR"):  # restored after the script sets them
        monkeypatch.setenv(name, os.environ.get(name, ""))
    monkeypatch.setattr(shipped, "shipped_dir", shipped.shipped_dir)
    assert script.main(["--op", OP, "--file", str(source), "--device", "cpu", "--budget-ms", "2"]) == 0
    captured = capsys.readouterr()
    assert f"2 key(s) of h200.json relabelled as NVIDIA sibling of {NVL.name} (sm 9.0, 136 SMs)" in captured.err
    assert "2 key(s) re-timed, 2 config(s) timed and checked, 0 leader re-time(s), 2 of 2 key(s) verified" in \
        captured.out, "mid is 9x slower on the sibling: fast alone, one config per key"


def test_missing_tunes_only_the_pairs_the_file_lacks_and_a_rerun_none(toys, tmp_path, monkeypatch):
    path = tmp_path / "nvl.json"
    write_file(path, [record("fast", 64, 1.0, 2, fp=NVL)])  # this GPU's file, one pair of ten
    monkeypatch.setattr(missing, "device_fingerprint", lambda pool, device: NVL)
    options = replace(OPTIONS, trials=1)
    with CountingPool() as pool:
        tasks = missing.missing_tasks(toys, pool, path, "cpu", NVL, [OP])
        assert [(t.job.shape[0], t.job.dtype, t.plugins) for t in tasks] == [
            (64, "float32", ("mid", "slow")), (64, "float16", ("fast", "mid")),
            (1024, "float32", ("fast", "mid", "slow")), (1024, "float16", ("fast", "mid"))], \
            "slow runs no float16; the file holds fast at 64 in float32"
        reports = missing.tune_missing(toys, pool, path, device="cpu", ops=[OP], options=options, warmers=2)
        checked = sorted((p, n, d, c["BLOCK"]) for (p, n, c, check), d in zip(pool.trials, pool.dtypes) if check)
        timers = pool.pids()
    logged = compiles(tmp_path)
    assert sorted(k for k, _ in logged) == ["fast-float16-1", "fast-float32-1", "mid-float16-1", "mid-float32-1",
                                            "slow-float32-1"], "each default config's kernel compiled once"
    assert not {pid for _, pid in logged} & timers, "by the warm-up workers"
    wanted = [(p, n, d, 1) for n in (64, 1024) for d in ("float32", "float16") for p in ("fast", "mid", "slow")
              if (p, n, d) != ("fast", 64, "float32") and (p, d) != ("slow", "float16")]
    assert checked == sorted(wanted), "one trial per missing pair: the default config"
    assert len(reports) == 4
    with CountingPool() as pool:
        assert missing.tune_missing(toys, pool, path, device="cpu", ops=[OP], options=options) == []
        assert pool.trials == [], "what the first run stored is no longer missing"
    write_file(path, [record("fast", 64, 1.0, 2, fp=H200)])
    with CountingPool() as pool, pytest.raises(ArgumentError, match="holds records of NVIDIA H200"):
        missing.tune_missing(toys, pool, path, device="cpu", ops=[OP], options=options)


def test_fill_shipped_tunes_the_gap_within_its_budget_and_merges_it(toys, tmp_path, monkeypatch, capsys):
    script = load_file(ROOT / "scripts" / "fill_shipped.py")
    path = tmp_path / "nvl.json"
    write_file(path, [record("fast", 64, 1.0, 2, fp=NVL)])
    monkeypatch.setattr(missing, "device_fingerprint", lambda pool, device: NVL)
    db = f"sqlite:///{tmp_path / 'fill.sqlite'}"
    common = [str(path), "--op", OP, "--device", "cpu", "--budget-ms", "2", "--db", db]
    assert script.main([*common, "--budget", "1e-9"]) == 0
    assert "4 task(s) left (9 pair(s)); run the command again" in capsys.readouterr().err
    assert len(json.loads(path.read_text())["records"]) == 1, "nothing tuned, nothing merged"
    assert script.main(common) == 0
    out = capsys.readouterr().out
    assert "0 replaced, 9 added, 10 records" in out, out
    records = json.loads(path.read_text())["records"]
    assert {(r["plugin"], r["dtype"], r["shape"]) for r in records} == {
        (p, d, str(n)) for n in (64, 1024) for d in ("float32", "float16") for p in ("fast", "mid", "slow")
        if not (p == "slow" and d == "float16")}
    assert script.main(common) == 0
    assert "lacks no (key, plugin) pair" in capsys.readouterr().err
    assert len(json.loads(path.read_text())["records"]) == 10


def test_fill_shipped_stale_retimes_the_file_s_stale_records_in_place(toys, tmp_path, capsys):
    script = load_file(ROOT / "scripts" / "fill_shipped.py")
    path = tmp_path / "shipped" / "nvl.json"
    old = replace(record("fast", 64, 1.0, 2, fp=replace(NVL, driver="570.0, CUDA 12.8")), source_hash="f" * 16,
                  code_files={})
    write_file(path, [old, record("mid", 64, 1.2, 4, fp=NVL)])
    db = f"sqlite:///{tmp_path / 'fill.sqlite'}"
    assert script.main([str(path), "--stale", "--op", OP, "--device", "cpu", "--budget-ms", "2", "--db", db]) == 0
    assert "1 replaced, 0 added, 2 records, 0 with a changed source" in capsys.readouterr().out
    fast, mid = json.loads(path.read_text())["records"]
    assert (fast["plugin"], fast["config"], fast["origin"]) == ("fast", {"BLOCK": 2}, "tuned")
    assert fast["source_hash"] == registry.impl(OP, "fast").source_hash, "current, where the stale one stood"
    assert mid["time_ms"] == 1.2, "a current record is left as it is"


class Describing:
    """A pool that answers a worker's describe in this process: the flags and bucket of the op's example call."""

    def __init__(self) -> None:
        self.asked: list[dict] = []

    def request(self, plugin: str, device: str, msg: dict, timeout: float) -> dict:
        self.asked.append(dict(msg["params"]))
        spec = registry.op(msg["op"])
        try:
            call = spec.example(tuple(msg["shape"]), getattr(torch, msg["dtype"]), "cpu", **msg["params"])
        except TypeError as exc:  # as the worker answers arguments the op does not take
            return {"ok": False, "error": str(exc)}
        return {"ok": True, "flags": spec.flags(call), "bucket": list(spec.bucket(call))}


def test_a_re_time_rebuilds_the_record_s_own_call_or_none():
    spec = registry.op("conv2d")
    call = spec.example((2, 3, 9, 9, 4, 3, 3, 2, 1), torch.float32, "cpu")
    flags = spec.flags(call)
    assert flags == "stride=2x2-padding=1x1-dilation=1x1"
    assert retime.flag_keywords(flags) == {"stride": [2, 2], "padding": [1, 1], "dilation": [1, 1]}
    assert retime.flag_keywords("approximate=tanh-causal") == {"approximate": "tanh"}
    # a record of the call whose geometry rode in its example shape: its recorded arguments ({}) and its shape
    # text alone rebuild a stride-1, unpadded convolution, another key
    record = Winner(op="conv2d", plugin="torch", source_hash="f" * 16, device=NVL, dtype="float32",
                    bucket=tuple(spec.bucket(call)), flags=flags, config={}, time_ms=1.0, spread=0.01,
                    shape=spec.shape_string(call), params={})
    pool = Describing()
    assert retime._params_for(pool, "cpu", record) == {"stride": [2, 2], "padding": [1, 1], "dilation": [1, 1]}
    assert pool.asked[0] == {}, "the recorded arguments were tried first, and gave another key"
    odd = replace(record, flags="stride=3x3-padding=1x1-dilation=1x1", bucket=(9, 9, 9, 9, 9, 9, 9))
    assert retime._params_for(Describing(), "cpu", odd) is None, "no arguments give that bucket: skipped"


def test_a_re_time_rebuilds_keys_whose_flag_words_are_joined_by_commas():
    spec = registry.op("linear")
    call = spec.example((64, 32, 48), torch.float32, "cpu", activation="gelu", pre=True)
    flags = spec.flags(call)
    assert flags == "gelu,pre"
    record = Winner(op="linear", plugin="torch", source_hash="f" * 16, device=NVL, dtype="float32",
                    bucket=tuple(spec.bucket(call)), flags=flags, config={}, time_ms=1.0, spread=0.01,
                    shape=spec.shape_string(call), params=None)
    assert retime._params_for(Describing(), "cpu", record) == {"activation": "gelu", "pre": True}
