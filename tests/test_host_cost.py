"""Host cost per call: ``kernelzoo bench --host`` (its table and JSON) and the choice cache's fast paths, which
must answer as the full paths do."""

from __future__ import annotations

import json
import math
import os

import pytest
import torch

import kernelzoo
from kernelzoo import dispatch
from kernelzoo.bench.host import MODES, OPS
from kernelzoo.cli import main
from kernelzoo.registry import registry


def test_bench_host_prints_every_op_and_mode_with_finite_ratios(tmp_path, capsys):
    out = tmp_path / "host.json"
    assert main(["bench", "--host", "--device", "cpu", "--calls", "2", "--rounds", "1", "--output", str(out)]) == 0
    table = capsys.readouterr().out
    assert "host µs per call on cpu (ratio to torch)" in table
    data = json.loads(out.read_text())
    assert {"devices", "versions", "date", "command", "cores"} <= set(data["meta"])
    rows = data["rows"]
    for op in OPS:
        for mode in MODES:
            assert any(line.split()[:2] == [op, mode] for line in table.splitlines()), (op, mode)
            found = {r["runner"]: r for r in rows if r["op"] == op and r["mode"] == mode}
            assert found["torch"]["status"] == "ok" and found["torch"]["ratio"] == pytest.approx(1.0)
            assert "auto" in found
            if mode == "forward":  # every op runs forward on the CPU, automatically and with each plugin forced
                assert found["auto"]["status"] == "ok", found["auto"]
                assert found["auto"]["chosen"] == kernelzoo.explain(op, *_args(op)).plugin
                forced = {r.removeprefix("use(").removesuffix(")") for r in found if r.startswith("use(")}
                assert {"openmp", "torch"} <= forced
    timed = [r for r in rows if r["status"] == "ok"]
    assert len(timed) > 2 * len(OPS)
    for r in timed:
        assert math.isfinite(r["us"]) and r["us"] > 0 and math.isfinite(r["ratio"]) and r["ratio"] > 0, r
    for r in rows:
        if r["status"] != "ok":
            assert r["reason"] and f"{r['op']} {r['mode']} {r['runner']}: {r['status']}" in table


def _args(op: str) -> tuple:
    from kernelzoo.bench.host import _inputs

    return _inputs(op, torch.device("cpu")).args


def test_bench_host_refuses_bad_counts_and_unknown_ops(capsys):
    assert main(["bench", "--host", "--device", "cpu", "--calls", "0"]) != 0
    assert "--calls and --rounds must be >= 1" in capsys.readouterr().err
    assert main(["bench", "--host", "--device", "cpu", "--op", "no_such_op"]) != 0
    assert "no_such_op" in capsys.readouterr().err


def test_the_forced_plugin_set_after_a_cached_choice_is_followed(monkeypatch):
    """The environment's fast path ("not set" from os.environ's own table) sees a variable set later, by either
    route, and the choice cache keys on it."""
    monkeypatch.delenv("KERNELZOO_PLUGIN", raising=False)
    op, x = registry.op("relu"), torch.randn(8, 8)
    dispatch.clear_cache()
    auto = dispatch.choose(op, op.check(x))
    assert not auto.forced
    os.environ["KERNELZOO_PLUGIN"] = "python"  # behind monkeypatch's back, so put back by hand
    try:
        assert dispatch.choose(op, op.check(x)).plugin == "python"
    finally:
        del os.environ["KERNELZOO_PLUGIN"]
    assert dispatch.choose(op, op.check(x)) is auto
    monkeypatch.setenv("KERNELZOO_PLUGIN", "openmp")
    assert dispatch.choose(op, op.check(x)).plugin == "openmp"
    monkeypatch.delenv("KERNELZOO_PLUGIN")
    assert dispatch.choose(op, op.check(x)) is auto


def test_tensor_list_calls_are_chosen_and_run_each_time():
    """A call whose inputs are tensor lists has no cached signature: each call is chosen afresh, and runs."""
    params = [torch.randn(5) for _ in range(3)]
    grads, exp_avg, exp_avg_sq = ([torch.randn(5) for _ in range(3)] for _ in range(3))
    for v in exp_avg_sq:
        v.abs_()
    want = [p.clone() for p in params]
    torch._fused_adamw_(want, [g.clone() for g in grads], [m.clone() for m in exp_avg],
                        [v.clone() for v in exp_avg_sq], [], [torch.tensor(1.0)] * 3, lr=1e-2, beta1=0.9,
                        beta2=0.999, weight_decay=0.0, eps=1e-8, amsgrad=False, maximize=False)
    dispatch.clear_cache()
    before = len(dispatch._chosen)
    kernelzoo.ops.adam_update_foreach_(params, grads, exp_avg, exp_avg_sq, step=1, lr=1e-2, beta1=0.9,
                                       beta2=0.999, eps=1e-8, weight_decay=0.0)
    assert len(dispatch._chosen) == before
    for got, expected in zip(params, want):
        torch.testing.assert_close(got, expected)


def test_bench_mytorch_step_quick_times_every_runner_that_runs_here(tmp_path, capsys):
    out = tmp_path / "step.json"
    assert main(["bench", "--mytorch-step", "--quick", "--device", "cpu", "--output", str(out)]) == 0
    table = capsys.readouterr().out
    rows = {r["runner"]: r for r in json.loads(out.read_text())["rows"]}
    assert set(rows) == {"torch", "torch.compile", "mytorch", "mytorch graphed"}
    for name in ("torch", "torch.compile", "mytorch"):
        r = rows[name]
        assert r["status"] == "ok" and r["ms"] > 0 and math.isfinite(r["ms"]), r
        assert r["first_loss"] == pytest.approx(rows["torch"]["first_loss"], rel=1e-3)  # one set of weights
    assert rows["mytorch"]["ratio"] == pytest.approx(rows["mytorch"]["ms"] / rows["torch"]["ms"])
    assert rows["mytorch graphed"]["status"] == "skipped" and rows["mytorch graphed"]["versus"] == "torch.compile"
    assert "2x8x16x2x1" in table and "mytorch graphed: skipped" in table


def test_bench_mytorch_step_refuses_a_bad_config(capsys):
    assert main(["bench", "--mytorch-step", "--device", "cpu", "--config", "8,128,250,4,2"]) != 0
    assert "dim a multiple of heads" in capsys.readouterr().err


def test_bench_host_split_times_each_layer_of_a_forward_call(tmp_path, capsys):
    out = tmp_path / "host.json"
    assert main(["bench", "--host", "--device", "cpu", "--op", "softmax", "--calls", "2", "--rounds", "1", "--split",
                 "--output", str(out)]) == 0
    assert "forward call, host µs by layer, the plugin forced, on cpu" in capsys.readouterr().out
    split = json.loads(out.read_text())["split"]
    assert {r["plugin"] for r in split} >= {"openmp", "torch"} and {r["op"] for r in split} == {"softmax"}
    for r in split:
        assert all(r[k] > 0 and math.isfinite(r[k]) for k in ("torch_us", "full_us", "key_us", "call_us", "run_us",
                                                              "first_us"))
        assert r["rest_us"] == pytest.approx(r["full_us"] - r["key_us"] - r["call_us"] - r["run_us"])
