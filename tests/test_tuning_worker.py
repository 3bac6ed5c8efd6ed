"""Failed configs are data: crashes, hangs, wrong answers and refusals end as failed trials, tuning goes on.

One exhaustive search of the toy plugin ``kz_toy/planted`` (tuning_toys.py), whose config
values each fail in one way, is shared by the tests of this module.
"""

from __future__ import annotations

import dataclasses

import pytest
import torch
from sqlalchemy import select
from tuning_helpers import planted_toys, temporary_db

from kernelzoo.db.models import Outcome, TrialModel
from kernelzoo.db.records import save_winner, winners
from kernelzoo.db.store import open_store
from kernelzoo.tuner import tune as tune_module
from kernelzoo.tuner.pool import WorkerPool
from kernelzoo.tuner.search import TuneOptions, _first_params, search
from kernelzoo.tuner.tune import tune_op

TIMEOUT_S = 3.0  # the hanging config is killed after this; the others finish in milliseconds


@pytest.fixture(scope="module")
def tuned(tmp_path_factory):
    """Tune kz_toy twice (the second run resumes the study); the store, both reports, trials by mode."""
    with pytest.MonkeyPatch.context() as mp, temporary_db(tmp_path_factory.mktemp("db"), mp) as url, \
            planted_toys(mp):
        store = open_store(url)
        options = TuneOptions(trials=20, timeout_s=TIMEOUT_S, budget_ms=5, warmup=1, calibrate=False)
        with WorkerPool(TIMEOUT_S) as pool:
            reports = tune_op(store, pool, "kz_toy", device="cpu", shapes=[(257,)], dtypes=["float32"],
                              options=options)
            again = tune_op(store, pool, "kz_toy", device="cpu", shapes=[(257,)], dtypes=["float32"],
                            options=options)
        trials = store.transaction(lambda s: {t.config["mode"]: t for t in s.scalars(
            select(TrialModel).where(TrialModel.plugin == "planted"))})
        yield store, reports, again, trials


def test_failed_configs_are_recorded_with_their_reason_and_tuning_completes(tuned):
    _, reports, _, trials = tuned
    (report,) = reports
    planted = next(p for p in report.plugins if p.plugin == "planted").result
    assert planted.ok == 2
    assert planted.failures == {"crash": 2, "timeout": 1, "wrong_result": 1, "unsupported": 1, "compile_error": 1}
    assert trials["abort"].outcome is Outcome.CRASH and "SIGABRT" in trials["abort"].message
    assert trials["segv"].outcome is Outcome.CRASH and "SIGSEGV" in trials["segv"].message
    assert trials["hang"].outcome is Outcome.TIMEOUT and f"{TIMEOUT_S:g} s" in trials["hang"].message
    assert trials["compile"].outcome is Outcome.COMPILE_ERROR and "expected ';'" in trials["compile"].message
    assert trials["unsupported"].outcome is Outcome.UNSUPPORTED
    assert trials["ok"].outcome is Outcome.OK and trials["ok"].time_ms > 0


def test_a_wrong_answer_never_wins(tuned):
    store, reports, _, trials = tuned
    assert trials["wrong"].outcome is Outcome.WRONG_RESULT
    assert "elements off" in trials["wrong"].message
    planted = {w.plugin: w for w in winners(store, op="kz_toy")}["planted"]
    assert planted.config["mode"] in ("ok", "slow")
    assert reports[0].winner in ("python", "planted")


def test_a_second_run_resumes_the_study_and_measures_nothing_again(tuned):
    store, reports, again, trials = tuned
    assert len(trials) == len(store.transaction(lambda s: s.scalars(select(TrialModel.trial_id).where(
        TrialModel.plugin == "planted")).all()))  # one trial record per config: none measured twice
    first = next(p for p in reports[0].plugins if p.plugin == "planted").result
    second = next(p for p in again[0].plugins if p.plugin == "planted").result
    assert second.winner == first.winner


@pytest.mark.parametrize("trials, measured", [(1, ["ok"]), (2, ["ok", "slow"])])
def test_tpe_measures_the_default_config_then_the_seeds(tmp_path, monkeypatch, trials, measured):
    """A search smaller than the space (TPE) starts from the plugin's default config, so the stored winner
    is never a config measured slower than the one dispatch would run untuned; the plugin's tuning seeds
    come next, so that a short search reaches them."""
    with temporary_db(tmp_path, monkeypatch) as url, planted_toys(monkeypatch):
        store = open_store(url)
        options = TuneOptions(trials=trials, timeout_s=TIMEOUT_S, budget_ms=5, warmup=1, calibrate=False)
        with WorkerPool(TIMEOUT_S) as pool:
            tune_op(store, pool, "kz_toy", device="cpu", plugins=["planted"], shapes=[(257,)], dtypes=["float32"],
                    options=options)
        configs = store.transaction(lambda s: [t.config for t in s.scalars(
            select(TrialModel).where(TrialModel.plugin == "planted").order_by(TrialModel.trial_id))])
    assert configs == [{"mode": mode} for mode in measured]


def test_the_reported_winner_is_dispatch_s_pick_among_every_plugin_stored_for_the_key(tmp_path, monkeypatch):
    """A run of one plugin reports the plugin dispatch will run for the key: a faster winner of another plugin,
    stored by an earlier run, beats the one this run found."""
    with temporary_db(tmp_path, monkeypatch) as url, planted_toys(monkeypatch):
        store = open_store(url)
        options = TuneOptions(trials=1, timeout_s=TIMEOUT_S, budget_ms=5, warmup=1, calibrate=False)
        key = {"device": "cpu", "shapes": [(257,)], "dtypes": ["float32"], "options": options}
        with WorkerPool(TIMEOUT_S) as pool:
            (first,) = tune_op(store, pool, "kz_toy", plugins=["python"], **key)
            (python,) = winners(store, op="kz_toy")
            save_winner(store, dataclasses.replace(python, time_ms=python.time_ms * 1e-3, spread=0.0))
            (second,) = tune_op(store, pool, "kz_toy", plugins=["planted"], **key)
        assert first.winner == "python"
        assert {w.plugin for w in winners(store, op="kz_toy")} == {"python", "planted"}
        assert second.winner == "python"


def test_a_run_stopped_inside_a_key_stores_none_of_its_winners_and_the_next_run_stores_them_all(tmp_path,
                                                                                                 monkeypatch):
    """Winners land per key, after every plugin's search of it: stopped after the first plugin's search, the run
    leaves the key with no winner (dispatch keeps the nearest key whose plugins were all compared, not the one
    plugin tuned before the stop); the next run resumes that study, measures nothing of it again, and stores
    both plugins' winners."""
    stopped = []

    def search_then_stop(store, pool, target, options, progress=None):
        if stopped:  # the second plugin of the key: the run is stopped (a time limit's signal, say)
            raise KeyboardInterrupt
        stopped.append(target.plugin)
        return search(store, pool, target, options, progress)

    with temporary_db(tmp_path, monkeypatch) as url, planted_toys(monkeypatch):
        store = open_store(url)
        options = TuneOptions(trials=1, timeout_s=TIMEOUT_S, budget_ms=5, warmup=1, calibrate=False)
        key = {"device": "cpu", "plugins": ["python", "planted"], "shapes": [(257,)], "dtypes": ["float32"],
               "options": options}

        def python_trials() -> list[int]:
            return store.transaction(lambda s: s.scalars(
                select(TrialModel.trial_id).where(TrialModel.plugin == "python")).all())

        with WorkerPool(TIMEOUT_S) as pool:
            with monkeypatch.context() as mp:
                mp.setattr(tune_module, "search", search_then_stop)
                with pytest.raises(KeyboardInterrupt):
                    tune_op(store, pool, "kz_toy", **key)
            assert stopped == ["python"] and len(python_trials()) == 1  # its trial ran and is stored
            assert winners(store, op="kz_toy") == []
            (report,) = tune_op(store, pool, "kz_toy", **key)
        assert {w.plugin for w in winners(store, op="kz_toy")} == {"python", "planted"}
        assert len(python_trials()) == 1  # resumed: the python study's trial was not measured again
        assert report.winner in ("python", "planted")


def test_first_params_keeps_the_configs_in_the_space_once_in_order():
    choices = {"BLOCK": [32, 64], "mode": ["a", "b"]}
    configs = ({"BLOCK": 64, "mode": "a"}, {"BLOCK": 128, "mode": "a"}, {"BLOCK": 32, "mode": "b"},
               {"BLOCK": 64, "mode": "a"}, {"BLOCK": 32})
    assert _first_params(choices, configs) == [{"BLOCK": 64, "mode": "a"}, {"BLOCK": 32, "mode": "b"}]


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU: the GPU memory a worker keeps")
def test_a_gpu_worker_gives_its_cached_memory_back_after_each_trial():
    """The tuner's workers, one a plugin, live side by side: one keeping its allocator's cache after a trial
    leaves the next plugin's worker that much less (at attention 4x32x16384x128 fp16 the torch worker ran out).
    A small first trial takes what a worker allocates once (its kernels, the timing's buffers)."""
    def trial(n: int) -> dict:
        return {"op": "add", "plugin": "torch", "device": "cuda", "dtype": "float32", "shape": [n], "params": {},
                "config": {}, "seed": 0, "warmup": 1, "budget_ms": 5}

    with WorkerPool(120) as pool:
        pool.hello("torch", "cuda")
        assert pool.trial("torch", "cuda", trial(1 << 20)).ok
        free_before, _ = torch.cuda.mem_get_info()
        # 1 GiB of float32 a tensor: the trial holds three, its check float64 copies (18.5 GiB cached after it)
        result = pool.trial("torch", "cuda", trial(1 << 28))
        free_after, _ = torch.cuda.mem_get_info()
    assert result.ok, result.message
    assert free_before - free_after < 1 << 30, f"{(free_before - free_after) / 2**30:.2f} GiB still held"
