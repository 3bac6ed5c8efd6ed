"""One Optuna study per (op, plugin, device, dtype, bucket, flags), stored in the tuning database.

The study lives in the same database through Optuna's RDB storage, so an interrupted run
resumes where it stopped, several tuners can share a study, and optuna-dashboard shows it.
A space no larger than the trial budget is searched exhaustively (every config enqueued
once); a larger one by TPE with a fixed seed. Trials count across runs: ``trials`` is the
study's total, and a config already measured in it is not measured again.
"""

from __future__ import annotations

import functools
import itertools
import json
import math
import time
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

import optuna
from optuna.trial import Trial, TrialState
from sqlalchemy import event
from sqlalchemy.exc import SQLAlchemyError

from kernelzoo.db.records import Winner, add_trial, bucket_text
from kernelzoo.db.store import Store, display_url, sqlite_path
from kernelzoo.errors import DatabaseError
from kernelzoo.fingerprint import Fingerprint
from kernelzoo.tuner.pool import TUNER_ATTR, WorkerPool, fail_interrupted_trials, tuner_tag

_PRIMITIVE = (bool, int, float, str, type(None))  # what Optuna's categorical choices may hold
BUSY_ATTR = "busy"  # a trial's user attribute: why its timing was taken under a load that makes it unusable


@dataclass(frozen=True)
class TuneOptions:
    """How hard to search; the defaults suit a GPU, tests pass tiny figures."""

    trials: int = 50  # trials per study in all, counting earlier (resumed) runs
    timeout_s: float = 60.0  # per trial, compile included; past it the worker is killed
    budget_ms: float = 200.0  # time_fn's measuring time per trial
    warmup: int = 3
    seed: int = 0  # TPE's seed, and the base of the inputs' seeds
    calibrate: bool = True  # measure the ceilings of a device the built-in table lacks (once, ~1 s)


@dataclass(frozen=True)
class Target:
    """What one study tunes: one plugin on one call shape of an op, and that call's key."""

    op: str
    plugin: str
    device: str
    dtype: str
    shape: tuple[int, ...]
    params: Mapping[str, Any]
    fingerprint: Fingerprint
    source_hash: str
    bucket: tuple[int, ...]
    flags: str
    shape_text: str
    config_space: Mapping[str, list[Any]]
    # the plugin's default config: TPE's first trial, so a winner is never a config measured slower than it
    default_config: Mapping[str, Any] = field(default_factory=dict)
    # the plugin's tuning seeds (whole configs): TPE's next trials
    seed_configs: tuple[Mapping[str, Any], ...] = ()

    @property
    def study_name(self) -> str:
        return ":".join(("kernelzoo", self.op, self.plugin, self.fingerprint.kind, self.dtype, bucket_text(self.bucket),
                         self.flags, self.source_hash, self.fingerprint.hash))

    def request(self) -> dict[str, Any]:
        """The call part of a worker request."""
        return {"op": self.op, "plugin": self.plugin, "device": self.device, "dtype": self.dtype,
                "shape": list(self.shape), "params": dict(self.params)}


@dataclass
class SearchResult:
    """A study's outcome: the plugin's best verified config (None if every trial failed) and the failures."""

    target: Target
    winner: Winner | None = None
    ok: int = 0
    failures: dict[str, int] = field(default_factory=dict)  # outcome -> trials
    first_failure: str = ""
    busy: int = 0  # trials timed while the machine was busy: not used, measured again by the next run
    measured: int = 0  # trials this run started (0: the study was complete already)


class TrialFailed(Exception):
    """Raised in the objective so Optuna records the trial as failed and goes on."""


def _stored(space: Mapping[str, list[Any]]) -> dict[str, list[Any]]:
    """Optuna choices per parameter: the values, or their reprs when a value is not a JSON scalar."""
    return {k: list(v) if all(isinstance(x, _PRIMITIVE) for x in v) else [repr(x) for x in v]
            for k, v in space.items()}


def _key(params: Mapping[str, Any]) -> str:
    return json.dumps(params, sort_keys=True, default=repr)


@functools.cache
def optuna_storage(url: str) -> optuna.storages.RDBStorage:
    """Optuna's storage on the tuning database, with the same SQLite settings as kernelzoo's own engine."""
    sqlite = sqlite_path(url) is not None
    kwargs = {"connect_args": {"timeout": 30}} if sqlite else {"pool_pre_ping": True}
    for attempt in range(6):
        try:
            storage = optuna.storages.RDBStorage(url, engine_kwargs=kwargs)
            break
        except SQLAlchemyError as exc:  # two tuners creating Optuna's tables at once: one waits
            if attempt == 5:
                raise DatabaseError(f"cannot open Optuna's storage in {display_url(url)}: {exc}") from exc
            time.sleep(0.2 * 2**attempt)
    if sqlite:
        @event.listens_for(storage.engine, "connect")
        def _connect(dbapi_connection: Any, _record: Any) -> None:
            dbapi_connection.isolation_level = None
            dbapi_connection.execute("PRAGMA busy_timeout = 30000")

        @event.listens_for(storage.engine, "begin")
        def _begin(connection: Any) -> None:
            connection.exec_driver_sql("BEGIN IMMEDIATE")  # Optuna reads then writes: take the lock first

        storage.engine.dispose()  # connections made before the listeners are dropped
    return storage


def search(store: Store, pool: WorkerPool, target: Target, options: TuneOptions,
           progress: Callable[[int, int, float | None], None] | None = None) -> SearchResult:
    """Run the study of ``target`` up to ``options.trials`` trials; the plugin's best config is the result's
    winner, not yet stored (``tune_op`` stores a key's winners together, once every plugin's search of it has
    ended, so that a run stopped inside a key leaves no key where some plugins have a winner and others none)."""
    optuna.logging.set_verbosity(optuna.logging.ERROR)  # failed configs are data, reported in the table
    storage = optuna_storage(store.url)
    choices = _stored(target.config_space)
    size = math.prod(len(v) for v in choices.values())
    study = optuna.create_study(study_name=target.study_name, storage=storage, direction="minimize",
                                sampler=optuna.samplers.TPESampler(seed=options.seed), load_if_exists=True)
    fail_interrupted_trials(study)  # left RUNNING by a tuner that was killed
    for name, value in (("op", target.op), ("plugin", target.plugin), ("dtype", target.dtype),
                        ("bucket", list(target.bucket)), ("flags", target.flags), ("shape", target.shape_text),
                        ("source_hash", target.source_hash), ("device", target.fingerprint.describe()),
                        ("device_hash", target.fingerprint.hash)):
        study.set_user_attr(name, value)
    finished = [t for t in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE, TrialState.FAIL))
                if "outcome" in t.user_attrs]  # measured: not ended by an interruption
    done = {_key(t.params): _Measured.of(t) for t in finished if "repeat_of" not in t.user_attrs}
    if size <= options.trials:  # exhaustive: each config not yet measured, once
        waiting = {_key(t.system_attrs.get("fixed_params", {})) for t in study.get_trials(states=(TrialState.WAITING,))}
        todo_params = [p for p in _grid(choices) if _key(p) not in done]
        for params in todo_params:
            if _key(params) not in waiting:
                study.enqueue_trial(params)
        total, todo = size, len(todo_params)
    else:
        total, todo = options.trials, max(0, options.trials - len(finished))
        if todo and not study.get_trials(deepcopy=False):  # a new study: the default, then the seeds
            for params in _first_params(choices, (target.default_config, *target.seed_configs))[:todo]:
                study.enqueue_trial(params)
    if todo:
        ticks = itertools.count(total - todo)

        def report(study: optuna.Study, *_: Any) -> None:
            if progress is not None:
                progress(next(ticks), total, _best(study))

        report(study)
        study.optimize(_objective(store, pool, target, options, choices, done), n_trials=todo,
                       catch=(TrialFailed,), callbacks=[report])
    result = _result(store, study, target, choices)
    result.measured = todo
    return result


def _first_params(choices: Mapping[str, list[Any]], configs: tuple[Mapping[str, Any], ...]) -> list[dict[str, Any]]:
    """Optuna's parameters of those ``configs`` that lie in the space, each once, in order."""
    out: list[dict[str, Any]] = []
    for config in configs:
        params = {k: v if v in choices.get(k, ()) else repr(v) for k, v in config.items()}
        if set(params) == set(choices) and all(params[k] in choices[k] for k in choices) and params not in out:
            out.append(params)
    return out


def _grid(choices: Mapping[str, list[Any]]) -> list[dict[str, Any]]:
    grid: list[dict[str, Any]] = [{}]
    for name, values in choices.items():
        grid = [{**g, name: v} for g in grid for v in values]
    return grid


def _best(study: optuna.Study) -> float | None:
    values = [t.value for t in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,)) if t.value is not None]
    return min(values) if values else None


def _config(target: Target, choices: Mapping[str, list[Any]], params: Mapping[str, Any]) -> dict[str, Any]:
    """The config values of Optuna's parameters (reprs mapped back to the values)."""
    return {k: target.config_space[k][choices[k].index(v)] for k, v in params.items() if k in choices}


def _objective(store: Store, pool: WorkerPool, target: Target, options: TuneOptions,
               choices: Mapping[str, list[Any]], done: dict[str, _Measured]) -> Callable[[Trial], float]:
    def objective(trial: Trial) -> float:
        trial.set_user_attr(TUNER_ATTR, tuner_tag())
        params = {name: trial.suggest_categorical(name, values) for name, values in choices.items()}
        key = _key(params)
        if key in done:  # TPE proposed a config this study measured: reuse the measurement
            previous = done[key]
            for name, value in previous.attrs.items():
                trial.set_user_attr(name, value)
            trial.set_user_attr("repeat_of", previous.number)
            if previous.value is None:
                raise TrialFailed(previous.attrs.get("message", ""))
            return previous.value
        config = _config(target, choices, params)
        seed = options.seed * 1_000_003 + trial.number  # fresh inputs per trial, reproducible
        result = pool.trial(target.plugin, target.device, {
            **target.request(), "config": config, "seed": seed, "warmup": options.warmup,
            "budget_ms": options.budget_ms})
        timing = result.timing
        if timing is not None and timing.load is not None:
            trial.set_user_attr("load", asdict(timing.load))  # the machine's load while it was timed
        if result.busy:  # not a measurement to rank on: the trial ends without an outcome, so a later run redoes it
            trial.set_user_attr(BUSY_ATTR, result.busy[:2000])
            raise TrialFailed(result.busy)
        add_trial(store, study_name=target.study_name, op=target.op, plugin=target.plugin, device=target.fingerprint,
                  shape=target.shape_text, config=config, outcome=result.outcome, message=result.message,
                  time_ms=timing.median_ms if timing else None, spread=timing.spread if timing else None)
        attrs: dict[str, Any] = {"outcome": result.outcome.value}
        if timing is None:
            attrs["message"] = result.message[:2000]
        else:
            attrs.update(spread=timing.spread, repeats=len(timing.times_ms))
        for name, value in attrs.items():
            trial.set_user_attr(name, value)
        done[key] = _Measured(trial.number, timing.median_ms if timing else None, attrs)
        if timing is None:
            raise TrialFailed(result.message)
        return timing.median_ms

    return objective


@dataclass(frozen=True)
class _Measured:
    """A config's measurement in this study, for repeats of it: trial number, median (None: failed), attrs."""

    number: int
    value: float | None
    attrs: dict[str, Any]

    @classmethod
    def of(cls, t: optuna.trial.FrozenTrial) -> _Measured:
        return cls(t.number, t.value if t.state == TrialState.COMPLETE else None, dict(t.user_attrs))


def _result(store: Store, study: optuna.Study, target: Target, choices: Mapping[str, list[Any]]) -> SearchResult:
    """The plugin's best verified config in the study, as its winner for the key."""
    out = SearchResult(target)
    best = None
    for t in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE, TrialState.FAIL)):
        if "outcome" not in t.user_attrs or "repeat_of" in t.user_attrs:
            out.busy += BUSY_ATTR in t.user_attrs and "outcome" not in t.user_attrs
            continue
        if t.state == TrialState.COMPLETE and t.value is not None:
            out.ok += 1
            if best is None or t.value < best.value:
                best = t
        else:
            kind = t.user_attrs["outcome"]
            out.failures[kind] = out.failures.get(kind, 0) + 1
            out.first_failure = out.first_failure or f"{kind}: {t.user_attrs.get('message', '')}"
    if best is not None:
        out.winner = Winner(op=target.op, plugin=target.plugin, source_hash=target.source_hash,
                            device=target.fingerprint, dtype=target.dtype, bucket=target.bucket, flags=target.flags,
                            config=_config(target, choices, best.params), time_ms=float(best.value),
                            spread=float(best.user_attrs.get("spread", 0.0)), shape=target.shape_text,
                            trials=out.ok + sum(out.failures.values()))
    return out

