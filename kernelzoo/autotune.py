"""Tuning from Python: ``kernelzoo.tune(...)`` and ``kernelzoo.record()``, the engine of ``kernelzoo tune``.

    with kernelzoo.record() as rec:            # the keys a block of code calls
        model(x)
    report = kernelzoo.tune(calls=rec)         # tunes exactly those, stores the winners
    print(report)                              # a summary table; report.to_json() for tools

A run is a list of keys (op, device, dtype, shape, keywords), each tuned by :func:`kernelzoo.tuner.tune.tune_op`
in worker processes; the report holds one :class:`~kernelzoo.tuner.tune.ShapeReport` per key.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from kernelzoo import dispatch
from kernelzoo.errors import ArgumentError, KernelzooError, UnsupportedError
from kernelzoo.registry import Call, Op, dtype_name, parse_dtype, registry
from kernelzoo.tuner.progress import Progress
from kernelzoo.tuner.tune import ShapeReport


@dataclass(frozen=True)
class Key:
    """One call's tuning key: the op, the device type, the dtype, the shape (``Op.shape_string``) and the keywords
    (``params``, as JSON text) the op's example rebuilds it from."""

    op: str
    device: str
    dtype: str
    shape: str
    params_json: str = "{}"

    @property
    def params(self) -> dict[str, Any]:
        return json.loads(self.params_json)

    @classmethod
    def of(cls, op: Op, call: Call) -> Key:
        try:
            params = json.dumps(call.params, sort_keys=True)
        except (TypeError, ValueError):  # keywords that are not JSON: the example's own
            params = "{}"
        return cls(op.name, call.device.type, dtype_name(call.dtype), op.shape_string(call), params)

    def __str__(self) -> str:
        return f"{self.op} {self.dtype} {self.shape} on {self.device}"


class Recording:
    """The keys the ops called inside ``with kernelzoo.record() as rec:`` ran, each once, in order of first call."""

    def __init__(self) -> None:
        self._keys: dict[tuple, Key] = {}
        self._context: Any = None

    def _observe(self, op: Op, call: Call, choice: dispatch.Choice, seconds: float) -> None:
        try:
            bucket = (op.name, call.device.type, call.dtype, op.bucket(call), op.flags(call))
        except Exception:  # an op whose key cannot be computed for this call is not tunable at it
            return
        if bucket not in self._keys:
            self._keys[bucket] = Key.of(op, call)

    def __enter__(self) -> Recording:
        self._context = dispatch.observe(self._observe)
        self._context.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        self._context.__exit__(*exc)
        self._context = None

    def __iter__(self) -> Iterator[Key]:
        return iter(list(self._keys.values()))

    def __len__(self) -> int:
        return len(self._keys)

    def __repr__(self) -> str:
        return f"Recording({len(self)} key(s): {', '.join(map(str, self)) or 'none'})"


def record() -> Recording:
    """``with kernelzoo.record() as rec:`` notes the key of every op the block runs; ``kernelzoo.tune(calls=rec)``
    then tunes exactly those. While recording, each op is timed between device synchronisations (as
    ``mytorch.trace`` does), so record a short run, not a production one."""
    return Recording()


@dataclass
class Job:
    """A key to tune: the op at one shape (as its example takes it), dtype and keywords, on one device."""

    op: str
    device: str
    shape: tuple[Any, ...]
    dtype: str
    params: dict[str, Any]
    studies: int  # plugins searched
    shape_text: str = ""
    miss: Any = None  # the pending key it comes from (forgotten once tuned)

    def __str__(self) -> str:
        shape = self.shape_text or "x".join(map(str, self.shape))
        return f"{self.op} {self.dtype} {shape} on {self.device}"


def _report_dict(r: ShapeReport) -> dict[str, Any]:
    floor = r.ceilings.floor_ms(r.flops, r.bytes, r.dtype) if r.ceilings else None
    plugins = []
    for p in r.plugins:
        entry: dict[str, Any] = {"plugin": p.plugin, "tuned": p.result is not None}
        if p.result is None:
            entry["skipped"] = p.skipped
        else:
            w = p.result.winner
            entry.update(ok_trials=p.result.ok, failed_trials=dict(p.result.failures),
                         first_failure=p.result.first_failure or None,
                         time_ms=w.time_ms if w else None, noise=w.spread if w else None,
                         config=dict(w.config) if w else None,
                         floor_pct=100 * floor / w.time_ms if (w and floor) else None)
        plugins.append(entry)
    return {"op": r.op, "device": r.fingerprint.describe(), "device_hash": r.fingerprint.hash, "dtype": r.dtype,
            "shape": r.shape_text, "bucket": list(r.bucket), "bucket_text": r.bucket_text, "flags": r.flags,
            "winner": r.winner, "floor_ms": floor, "ceilings": r.ceilings.source if r.ceilings else None,
            "plugins": plugins}


@dataclass
class TuneReport:
    """What a tuning run did: one report per key tuned, the keys it skipped (with why) and those the budget left."""

    keys: list[ShapeReport] = field(default_factory=list)
    skipped: list[tuple[str, str]] = field(default_factory=list)  # (key, reason)
    not_started: list[str] = field(default_factory=list)  # keys the time budget left untouched
    seconds: float = 0.0
    load: list[float] = field(default_factory=list)  # the 1-minute load average as the run began and ended
    cores: int = 1

    @property
    def untuned(self) -> list[ShapeReport]:
        """Keys that ended without a verified winner."""
        return [r for r in self.keys if r.winner is None]

    @property
    def ok(self) -> bool:
        """Every key asked for has a verified winner."""
        return not self.untuned and not self.skipped and not self.not_started

    def to_dict(self) -> dict[str, Any]:
        return {"ok": self.ok, "seconds": round(self.seconds, 3), "load": self.load, "cores": self.cores,
                "keys": [_report_dict(r) for r in self.keys],
                "skipped": [{"key": k, "reason": why} for k, why in self.skipped], "not_started": self.not_started}

    def to_json(self, indent: int | None = 2) -> str:
        return json.dumps(self.to_dict(), indent=indent, default=str)

    def summary(self) -> str:
        """One row per key (its winner, time, ratio to torch, % of the floor), then the skipped keys."""
        from kernelzoo.tuner.report import format_summary

        return format_summary(self)

    def __str__(self) -> str:
        return self.summary()


def plan_op(op: str, device: str, *, plugins: Sequence[str] | None = None,
            shapes: Sequence[tuple[int, ...]] | None = None, dtypes: Sequence[str] | None = None) -> list[Job]:
    """The keys ``kernelzoo tune --op OP`` tunes: every shape × variant × dtype (the op's own where not given)."""
    from kernelzoo.tuner.tune import default_dtypes, plugins_for

    spec = registry.op(op)
    kind = torch.device(device).type
    names = plugins_for(op, device, plugins)
    if not names:
        raise ArgumentError(f"{op}: no plugin of it is chosen automatically on {kind}; pass --plugin")
    elsewhere = [p for p in names if not registry.impl(op, p).dtypes.get(kind)]
    if elsewhere:
        where = {p: ", ".join(registry.impl(op, p).dtypes) or "no device" for p in elsewhere}
        raise UnsupportedError(f"{op}: plugin {', '.join(f'{p} runs on {d}' for p, d in where.items())}, not on "
                               f"{kind}; pass another --plugin or --device")
    shapes = list(shapes) if shapes else list(spec.shapes.get(kind, ()))
    if not shapes:
        raise ArgumentError(f"{op}: no representative shapes for {kind}; pass --shape, e.g. --shape 1024x1024")
    dtype_names = [dtype_name(parse_dtype(d)) for d in dtypes] if dtypes else default_dtypes(op, names, kind)
    variants = list(getattr(spec, "variants", None) or ({},))
    return [Job(op, device, tuple(shape), dtype, dict(params), len(names))
            for shape in shapes for params in variants for dtype in dtype_names]


def _job_for(op: str, device: str, shape_text: str, dtype: str, params: Mapping[str, Any],
             plugins: Sequence[str] | None, miss: Any = None) -> Job:
    from kernelzoo.tuner.pending import example_params
    from kernelzoo.tuner.tune import plugins_for

    spec = registry.op(op)
    shape = spec.parse_shape(shape_text)
    return Job(op, device, tuple(shape), dtype, example_params(spec, shape, dtype, params),
               len(plugins_for(op, device, plugins)), shape_text, miss)


def plan_keys(keys: Iterable[Key], device: str, plugins: Sequence[str] | None,
              skipped: list[tuple[str, str]]) -> list[Job]:
    """A job per recorded key of ``device``'s type; keys that cannot be rebuilt go to ``skipped``."""
    kind = torch.device(device).type
    jobs = []
    for key in keys:
        if key.device != kind:
            continue
        try:
            jobs.append(_job_for(key.op, device, key.shape, key.dtype, key.params, plugins))
        except Exception as exc:  # a key that cannot be rebuilt is reported, the others go on
            skipped.append((str(key), f"{type(exc).__name__}: {exc}"))
    return jobs


def plan_pending(store: Any, pool: Any, device: str, op: str | None, plugins: Sequence[str] | None,
                 skipped: list[tuple[str, str]]) -> list[Job]:
    """A job per key programs called on ``device`` without an exact tuned winner (of ``op``)."""
    from kernelzoo.db.records import missed_keys
    from kernelzoo.tuner.tune import device_fingerprint

    fp = device_fingerprint(pool, device)
    known = registry.load().ops
    jobs = []
    for miss in missed_keys(store, fp.hash, op):
        label = f"{miss.op} {miss.dtype} {miss.shape} on {device}"
        if miss.op not in known:
            skipped.append((label, "the op is not registered here"))
            continue
        try:
            jobs.append(_job_for(miss.op, device, miss.shape, miss.dtype, dict(miss.params), plugins, miss))
        except Exception as exc:  # a key that cannot be rebuilt is reported, the others go on
            skipped.append((label, f"{type(exc).__name__}: {exc}"))
    return jobs


def run_jobs(store: Any, pool: Any, jobs: Sequence[Job], *, plugins: Sequence[str] | None, options: Any,
             progress: Progress, budget: float | None = None, report: TuneReport | None = None) -> TuneReport:
    """Tune ``jobs`` in order (within ``budget`` seconds, checked between keys); a key that fails is noted."""
    from kernelzoo.calibrate import ceilings_here, current_load, usable_cores
    from kernelzoo.db.records import forget_miss
    from kernelzoo.tuner.tune import tune_op

    report = report or TuneReport()
    start = time.monotonic()
    report.cores = usable_cores()
    report.load += [x for x in (current_load(),) if x is not None]
    if jobs and options.calibrate and torch.device(jobs[0].device).type == "cpu":
        ceilings_here("cpu", store)  # measured here, where its noise and the load are recorded with it
    progress.plan(sum(j.studies for j in jobs))
    try:
        for i, job in enumerate(jobs):
            if budget is not None and time.monotonic() - start > budget:
                report.not_started += [str(j) for j in jobs[i:]]
                progress.note(f"time budget of {budget:g} s spent: {len(jobs) - i} key(s) not started")
                break
            try:
                found = tune_op(store, pool, job.op, device=job.device, plugins=plugins, shapes=[job.shape],
                                dtypes=[job.dtype], params=[job.params], options=options, progress=progress)
            except KernelzooError as exc:
                report.skipped.append((str(job), str(exc)))
                progress.note(f"skipped {job}: {exc}", detail=True)
                found = []
            finally:
                progress.key_done(job.studies)
            report.keys += found
            _label_studies(store, found)
            if job.miss is not None and any(r.winner is not None and r.bucket == job.miss.bucket
                                            and r.flags == job.miss.flags for r in found):
                forget_miss(store, job.miss)
    finally:
        progress.close()
        report.seconds += time.monotonic() - start
        report.load += [x for x in (current_load(),) if x is not None]
    return report


def _label_studies(store: Any, reports: Sequence[ShapeReport]) -> None:
    """The key's winner as a user attribute of each plugin's study, for optuna-dashboard."""
    from kernelzoo.tuner.search import optuna_storage

    storage = None
    for r in reports:
        for p in r.plugins:
            if p.result is None:
                continue
            storage = storage or optuna_storage(store.url)
            try:
                study_id = storage.get_study_id_from_name(p.result.target.study_name)
                storage.set_study_user_attr(study_id, "key_winner", r.winner or "none")
                if p.result.winner is not None:
                    storage.set_study_user_attr(study_id, "best_ms", p.result.winner.time_ms)
                    storage.set_study_user_attr(study_id, "best_config", dict(p.result.winner.config))
            except Exception:  # labels for the dashboard never fail a run (a read-only database)
                return


def _devices(devices: str | Sequence[str] | None) -> list[str]:
    from kernelzoo.commands._common import check_device

    if devices is None:
        return [check_device(None, "tune")]
    names = [devices] if isinstance(devices, str) else list(devices)
    return [check_device(d, "tune") for d in names]


def tune(op: str | Sequence[str] | None = None, *, calls: Iterable[Key] | None = None,
         dtypes: Sequence[str] | None = None, devices: str | Sequence[str] | None = None,
         budget: float | None = None, db: str | None = None, plugins: Sequence[str] | None = None,
         shapes: Sequence[str] | None = None, trials: int = 20, measure_ms: float = 200.0, seed: int = 0,
         progress: bool = False, verbose: bool = False) -> TuneReport:
    """Search, verify, time and store the winners, as ``kernelzoo tune`` does.

    What is tuned: ``op`` (a name or names: its representative shapes, or ``shapes`` like "4096x4096"),
    else the keys of ``calls`` (a :func:`record`), else the keys programs called untuned (``tune --pending``).
    ``dtypes`` narrows the dtypes, ``devices`` names the devices ("cpu", "cuda"; default: the GPU if there
    is one), ``budget`` is a time limit in seconds (checked between keys), ``db`` a database URL or file path,
    ``plugins`` the plugins searched, ``trials`` the trials per plugin and key, ``measure_ms`` the measuring
    time per trial. ``progress`` draws the overall progress on stderr.
    """
    from kernelzoo.commands._common import check_ops, check_plugins
    from kernelzoo.db import as_url
    from kernelzoo.db.store import open_store
    from kernelzoo.tuner.pool import WorkerPool
    from kernelzoo.tuner.search import TuneOptions

    registry.load()
    ops = [op] if isinstance(op, str) else list(op or ())
    check_ops(ops)
    check_plugins(plugins, ops or None)
    if trials < 1 or measure_ms <= 0:
        raise ArgumentError(f"tune: trials must be >= 1 and measure_ms > 0, got {trials} and {measure_ms}")
    if budget is not None and budget <= 0:
        raise ArgumentError(f"tune: budget must be a positive number of seconds, got {budget}")
    keys = list(calls) if calls is not None else None
    options = TuneOptions(trials=trials, budget_ms=measure_ms, seed=seed)
    store = open_store(as_url(db) if db else None, check=True)
    bar = Progress(enabled=progress, verbose=verbose)
    report = TuneReport()
    start = time.monotonic()
    for device in _devices(devices):
        left = None if budget is None else max(budget - (time.monotonic() - start), 0.0)
        with WorkerPool(options.timeout_s) as pool:
            if ops:
                parsed = None
                jobs = []
                for name in ops:
                    if shapes:
                        parsed = [registry.op(name).parse_shape(s) for s in shapes]
                    jobs += plan_op(name, device, plugins=plugins, shapes=parsed, dtypes=dtypes)
            elif keys is not None:
                jobs = plan_keys(keys, device, plugins, report.skipped)
            else:
                jobs = plan_pending(store, pool, device, None, plugins, report.skipped)
            if dtypes and not ops:
                wanted = {dtype_name(parse_dtype(d)) for d in dtypes}
                jobs = [j for j in jobs if j.dtype in wanted]
            run_jobs(store, pool, jobs, plugins=plugins, options=options, progress=bar, budget=left, report=report)
    dispatch.clear_cache()
    return report
