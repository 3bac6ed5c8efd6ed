"""One Optuna study per (op, plugin, device, dtype, bucket, flags, kernel code, config space), stored in the
tuning database.

The study lives in the same database through Optuna's RDB storage, so an interrupted run
resumes where it stopped, several tuners can share a study, and optuna-dashboard shows it.
A space no larger than the trial budget is searched exhaustively (every config enqueued
once); a larger one by TPE, seeded from the options and the study's length. Trials count
across runs: ``trials`` is the number of distinct configs the study holds, and a config
already measured in it is never measured again. A study of a changed config space starts
with the measurements of the same code in the old one, so adding a config measures only it.
"""

from __future__ import annotations

import hashlib
import json
import math
import random
import time
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field
from datetime import datetime, timedelta
from typing import Any

import optuna
from optuna.trial import Trial, TrialState

from kernelzoo.db.records import Winner, add_trial
from kernelzoo.db.store import Store
from kernelzoo.db.studies import optuna_storage
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
    # re-time a key's two leaders only when the second is within this fraction of the first (0: always)
    clear: float = 0.0


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
    # measure exactly these configs (those of the space not yet measured), not a search: `tune --stale/--verify`
    only_configs: tuple[Mapping[str, Any], ...] | None = None
    code_files: Mapping[str, str] = field(default_factory=dict)  # Implementation.code_files, for the winner

    @property
    def space_hash(self) -> str:
        """Hash of the config space: a study's parameters cannot change, so each space has its own study."""
        text = json.dumps(sorted((k, list(v)) for k, v in _stored(self.config_space).items()))
        return hashlib.sha256(text.encode()).hexdigest()[:16]

    @property
    def study_name(self) -> str:
        return study_name(self)

    def request(self) -> dict[str, Any]:
        """The call part of a worker request."""
        return {"op": self.op, "plugin": self.plugin, "device": self.device, "dtype": self.dtype,
                "shape": list(self.shape), "params": dict(self.params)}


def study_name(target: Target) -> str:
    """A name people can read in optuna-dashboard, unique per key, kernel code and config space:
    'kernelzoo: softmax · triton · float32 · 2^12,2^10 · NVIDIA H200 :<code hash>:<space hash>:<device hash>' (flags
    after the bucket where the key has them). The 'kernelzoo:' prefix marks kernelzoo's studies in a shared
    database; the hashes, colon-separated at the end, let a new study of the same code find the measurements of
    its other config spaces (:func:`_seed`)."""
    parts = [target.op, target.plugin, target.dtype, ",".join(f"2^{b}" for b in target.bucket)]
    parts += [target.flags] if target.flags else []
    parts += [target.fingerprint.name or target.fingerprint.kind]
    return (f"kernelzoo: {' · '.join(parts)} "
            f":{target.source_hash}:{target.space_hash}:{target.fingerprint.hash}")


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


def _stored(space: Mapping[str, list[Any]]) -> dict[str, list[Any]]:
    """Optuna choices per parameter: the values, or their reprs when a value is not a JSON scalar."""
    return {k: list(v) if all(isinstance(x, _PRIMITIVE) for x in v) else [repr(x) for x in v]
            for k, v in space.items()}


def _key(params: Mapping[str, Any]) -> str:
    return json.dumps(params, sort_keys=True, default=repr)


def search(store: Store, pool: WorkerPool, target: Target, options: TuneOptions,
           progress: Callable[[int, int, float | None], None] | None = None) -> SearchResult:
    """Run the study of ``target`` until it holds ``options.trials`` distinct measured configs (every config of a
    space no larger, or exactly ``target.only_configs`` when set); the plugin's best config is the result's
    winner, not yet stored (``tune_op`` stores a key's winners together, once every plugin's search of it has
    ended, so that a run stopped inside a key leaves no key where some plugins have a winner and others none).

    A config the study holds a finished measurement of is never measured again, whoever measured it (a resumed
    run, another tuner sharing the study, or a study of the same code before its space changed, whose
    measurements seed this one): the trial the sampler proposed is closed as a repeat and another config is
    measured instead, so the count is of distinct configs.
    """
    optuna.logging.set_verbosity(optuna.logging.ERROR)  # failed configs are data, reported in the table
    storage = optuna_storage(store.url)
    choices = _stored(target.config_space)
    grid_size = math.prod(len(v) for v in choices.values())
    study = optuna.create_study(study_name=target.study_name, storage=storage, direction="minimize",
                                load_if_exists=True)
    fail_interrupted_trials(study)  # left RUNNING by a tuner that was killed
    for name, value in (("op", target.op), ("plugin", target.plugin), ("dtype", target.dtype),
                        ("bucket", list(target.bucket)), ("flags", target.flags), ("shape", target.shape_text),
                        ("source_hash", target.source_hash), ("space_hash", target.space_hash),
                        ("device", target.fingerprint.describe()), ("device_hash", target.fingerprint.hash)):
        study.set_user_attr(name, value)
    if not study.get_trials(deepcopy=False):
        _seed(store, study, target, choices)
    # A resumed run must not replay the sequence of the runs before it: the seed moves on with the trials.
    study.sampler = optuna.samplers.TPESampler(seed=options.seed + len(study.get_trials(deepcopy=False)))
    held = _held(study, options)
    if target.only_configs is not None:
        wanted: list[dict[str, Any]] | None = _first_params(choices, target.only_configs)
        total = len(wanted)
    elif grid_size <= options.trials:  # exhaustive: each config not yet measured, once
        wanted, total = _grid(choices), grid_size
    else:
        wanted, total = None, options.trials
        fresh = [p for p in _first_params(choices, (target.default_config, *target.seed_configs))
                 if _key(p) not in held]
        waiting = _waiting(study)
        for params in fresh[:max(0, total - len(held))]:  # the default, then the seeds, ahead of TPE's proposals
            if _key(params) not in waiting:
                study.enqueue_trial(params)
    if wanted is not None:
        waiting = _waiting(study)
        for params in wanted:
            if _key(params) not in held and _key(params) not in waiting:
                study.enqueue_trial(params)

    def remaining(held: Mapping[str, _Measured]) -> int:
        if wanted is not None:
            return sum(_key(p) not in held for p in wanted)
        return max(0, total - len(held)) if len(held) < grid_size else 0

    def done_count(held: Mapping[str, _Measured]) -> int:
        return total - remaining(held)

    if progress is not None and remaining(held):
        progress(done_count(held), total, _best(study))
    allowed = {_key(p) for p in wanted} if wanted is not None else None
    proposals = measured = 0
    busy: set[str] = set()  # configs timed under load in this run: measured again by a later run, not this one
    while remaining(held) and proposals < 4 * total + 16:  # bounded: the sampler may keep proposing repeats
        proposals += 1
        trial = study.ask()
        params = {name: trial.suggest_categorical(name, values) for name, values in choices.items()}
        key = _key(params)
        held = {**_held(study, options, trial.number), **{k: _Measured(-1, None, {}) for k in busy}}
        if key in held or (allowed is not None and key not in allowed):
            if key in held:
                trial.set_user_attr("repeat_of", held[key].number)
            else:
                trial.set_user_attr("skipped", "not a config this run measures")
            study.tell(trial, state=TrialState.FAIL)
            unmeasured = [p for p in (wanted if wanted is not None else _sample(choices, options.seed, trial.number))
                          if _key(p) not in held]
            if unmeasured and _key(unmeasured[0]) not in _waiting(study):
                study.enqueue_trial(unmeasured[0])
            continue
        value = _measure(store, pool, target, options, choices, trial, params)
        measured += 1
        if BUSY_ATTR in trial.user_attrs:
            busy.add(key)
        if value is None:
            study.tell(trial, state=TrialState.FAIL)
        else:
            study.tell(trial, value)
        held = {**_held(study, options), **{k: _Measured(-1, None, {}) for k in busy}}
        if progress is not None:
            progress(done_count(held), total, _best(study))
    _await_others(study, options)
    result = _result(store, study, target, choices)
    result.measured = measured
    return result


def _held(study: optuna.Study, options: TuneOptions, asking: int | None = None) -> dict[str, _Measured]:
    """The configs the study holds a measurement of: finished trials that measured (not repeats, not ended by an
    interruption), and trials another tuner is measuring now (``_measuring``)."""
    held: dict[str, _Measured] = {}
    for t in study.get_trials(deepcopy=False):
        if t.state in (TrialState.COMPLETE, TrialState.FAIL):
            if "outcome" in t.user_attrs and "repeat_of" not in t.user_attrs:
                held.setdefault(_key(t.params), _Measured.of(t))
        elif t.number != asking and _measuring(t, options):
            held.setdefault(_key(t.params), _Measured(t.number, None, {}))
    return held


def _measuring(t: optuna.trial.FrozenTrial, options: TuneOptions) -> bool:
    """Whether a tuner is measuring ``t`` now: running, not a repeat, started within two trial timeouts (an older
    one was left by a tuner that died)."""
    recent = datetime.now() - timedelta(seconds=2 * options.timeout_s + 60)
    return (t.state == TrialState.RUNNING and t.datetime_start is not None
            and t.datetime_start.replace(tzinfo=None) > recent and "repeat_of" not in t.user_attrs)


def _await_others(study: optuna.Study, options: TuneOptions, poll_s: float = 0.05) -> None:
    """Wait, for as long as a trial may take, until the trials other tuners are measuring now have ended: the
    search counted their configs as measured, so the key's result must hold their measurements (else a key whose
    last configs another tuner measured would end here without a winner). Trials they start later are theirs."""
    def running() -> set[int]:
        return {t.number for t in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,))
                if _measuring(t, options)}

    pending = running()
    deadline = time.monotonic() + 2 * options.timeout_s + 60
    while pending and time.monotonic() < deadline:
        time.sleep(poll_s)
        pending &= running()


def _waiting(study: optuna.Study) -> set[str]:
    return {_key(t.system_attrs.get("fixed_params", {})) for t in study.get_trials(states=(TrialState.WAITING,))}


def _sample(choices: Mapping[str, list[Any]], seed: int, number: int, n: int = 64) -> list[dict[str, Any]]:
    """``n`` random configs of the space (reproducible from the seed and the trial number): a replacement for a
    proposal the study already measured."""
    rng = random.Random(seed * 1_000_003 + number)
    return [{k: rng.choice(v) for k, v in choices.items()} for _ in range(n)]


def _seed(store: Store, study: optuna.Study, target: Target, choices: Mapping[str, list[Any]]) -> int:
    """Add to a new study the measurements of the same code, key and device stored by its studies of other config
    spaces, for configs still in this one; they count toward the study. How many were added."""
    from optuna.distributions import CategoricalDistribution
    from optuna.trial import create_trial
    from sqlalchemy import select

    from kernelzoo.db.models import DeviceModel, Outcome, TrialModel

    prefix, suffix = target.study_name.rsplit(":", 2)[0] + ":", ":" + target.fingerprint.hash

    def read(session: Any) -> list[TrialModel]:
        return list(session.scalars(select(TrialModel).join(DeviceModel).where(
            TrialModel.op == target.op, TrialModel.plugin == target.plugin,
            DeviceModel.fingerprint_hash == target.fingerprint.hash).order_by(TrialModel.trial_id)))

    best: dict[str, TrialModel] = {}
    for row in store.transaction(read):
        if not (row.study_name.startswith(prefix) and row.study_name.endswith(suffix)) or \
                row.study_name == target.study_name:
            continue
        params = _params_of(choices, row.config)
        if params is None:
            continue
        key = _key(params)
        kept = best.get(key)
        if kept is None or (row.outcome == Outcome.OK and (kept.outcome != Outcome.OK or
                                                            (row.time_ms or 0) < (kept.time_ms or 0))):
            best[key] = row
    distributions = {k: CategoricalDistribution(v) for k, v in choices.items()}
    for row in best.values():
        params = _params_of(choices, row.config)
        attrs = {"outcome": row.outcome.value, "seeded_from": row.study_name}
        if row.outcome == Outcome.OK and row.time_ms is not None:
            attrs["spread"] = row.spread or 0.0
            trial = create_trial(params=params, distributions=distributions, value=row.time_ms, user_attrs=attrs)
        else:
            attrs["message"] = row.message[:2000]
            trial = create_trial(params=params, distributions=distributions, state=TrialState.FAIL,
                                 user_attrs=attrs)
        study.add_trial(trial)
    return len(best)


def _params_of(choices: Mapping[str, list[Any]], config: Mapping[str, Any]) -> dict[str, Any] | None:
    """Optuna's parameters of a stored config, None unless it is a point of the space."""
    params = {}
    for name, values in choices.items():
        if name not in config:
            return None
        value = config[name]
        value = value if value in values else repr(value)
        if value not in values:
            return None
        params[name] = value
    return params if set(config) == set(choices) else None


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


def _measure(store: Store, pool: WorkerPool, target: Target, options: TuneOptions,
             choices: Mapping[str, list[Any]], trial: Trial, params: Mapping[str, Any]) -> float | None:
    """Run one trial in a worker and record it; its median time, None if it failed or was timed under load (then it
    carries no outcome, so that a later run measures it again)."""
    trial.set_user_attr(TUNER_ATTR, tuner_tag())
    config = _config(target, choices, params)
    seed = options.seed * 1_000_003 + trial.number  # fresh inputs per trial, reproducible
    result = pool.trial(target.plugin, target.device, {
        **target.request(), "config": config, "seed": seed, "warmup": options.warmup,
        "budget_ms": options.budget_ms})
    timing = result.timing
    if timing is not None and timing.load is not None:
        trial.set_user_attr("load", asdict(timing.load))  # the machine's load while it was timed
    if result.busy:  # not a measurement to rank on
        trial.set_user_attr(BUSY_ATTR, result.busy[:2000])
        return None
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
    return timing.median_ms if timing is not None else None


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
    counted: set[str] = set()
    for t in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE, TrialState.FAIL)):
        if "outcome" not in t.user_attrs or "repeat_of" in t.user_attrs or _key(t.params) in counted:
            out.busy += BUSY_ATTR in t.user_attrs and "outcome" not in t.user_attrs
            continue  # a config two tuners measured at once counts once: its first measurement
        counted.add(_key(t.params))
        if t.state == TrialState.COMPLETE and t.value is not None:
            out.ok += 1
            # equal times go to the first config in sorted order, not to the first measured: databases
            # holding the same trials in another order pick the same config
            if best is None or (t.value, _key(t.params)) < (best.value, _key(best.params)):
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
                            trials=out.ok + sum(out.failures.values()), code_files=dict(target.code_files),
                            params=dict(target.params))
    return out

