"""``kernelzoo tune --missing FILE``: tune only the (key, plugin) pairs a winners file lacks.

A shipped file covers each op's representative keys (``Op.shapes``, each variant, the dtypes ``kernelzoo tune``
picks) for every plugin that runs them. This finds the pairs the file holds no record of (stale records count
as held: ``tune --stale`` re-times those) and that the database has no current winner of for this GPU (so a
rerun resumes), and tunes them, key by key, the slow reference plugins (``LAST``) after every other plugin's
pairs, until the budget is spent; the configs the searches measure first are compiled beforehand, side by
side. ``kernelzoo db export`` and ``scripts/merge_records.py`` then add the winners to the file;
``scripts/fill_shipped.py`` runs the three.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import torch

from kernelzoo.autotune import Job, plan_op
from kernelzoo.db import lifecycle
from kernelzoo.db.records import winners
from kernelzoo.db.store import Store
from kernelzoo.db.transfer import read_file
from kernelzoo.errors import ArgumentError, KernelzooError
from kernelzoo.fingerprint import Fingerprint
from kernelzoo.registry import parse_dtype, registry
from kernelzoo.tuner.pool import WorkerLost, WorkerPool
from kernelzoo.tuner.progress import Progress
from kernelzoo.tuner.retime import CLEAR, NotesOnly
from kernelzoo.tuner.search import TuneOptions
from kernelzoo.tuner.tune import ShapeReport, device_fingerprint, plugins_for, tune_op
from kernelzoo.tuner.warm import warm

LAST = ("python",)  # the tensor-op reference plugins: rarely a winner, slow at large shapes, tuned last


@dataclass(frozen=True)
class Task:
    """One key of an op the file lacks records of, and the plugins it lacks."""

    job: Job
    plugins: tuple[str, ...]

    def __str__(self) -> str:
        return f"{self.job.op} {self.job.dtype} {'x'.join(map(str, self.job.shape))}" + \
            (f" {self.job.params}" if self.job.params else "") + f" [{', '.join(self.plugins)}]"


def missing_tasks(store: Store, pool: WorkerPool, path: Path, device: str, fp: Fingerprint,
                  ops: Sequence[str] | None = None, plugins: Sequence[str] | None = None,
                  progress: Progress | None = None) -> list[Task]:
    """The keys of ``ops`` (default: every op with representative shapes on the device) and the plugins of each
    that neither ``path`` nor the database (this GPU's current winners) holds a record of, in plan order; the
    slow ``LAST`` plugins in tasks of their own after all others. Each key's bucket and flags are asked of a
    worker. ArgumentError if the file holds records of other hardware."""
    progress = progress or Progress(enabled=False)
    kind = torch.device(device).type
    records = read_file(path)
    foreign = sorted({w.device.describe() for w in records if w.device.hardware_hash != fp.hardware_hash})
    if foreign:
        raise ArgumentError(f"{path}: holds records of {', '.join(foreign)}, not of this {fp.describe()}; fill a "
                            "file on the GPU that measured it")
    held = {(w.op, w.plugin, w.dtype, w.bucket, w.flags) for w in records}
    held |= {(w.op, w.plugin, w.dtype, w.bucket, w.flags) for w in winners(store, device_hash=fp.hash)
             if lifecycle.is_current(w)}
    names = list(ops) if ops else sorted(op for op, spec in registry.load().ops.items() if spec.shapes.get(kind))
    first: list[Task] = []
    last: list[Task] = []
    for op in names:
        chosen = plugins_for(op, device, plugins)
        pool.start(chosen, device)
        for job in plan_op(op, device, plugins=chosen):
            takes = [p for p in chosen if parse_dtype(job.dtype) in registry.impl(op, p).dtypes.get(kind, ())]
            if not takes:
                continue
            msg = {"cmd": "describe", "op": op, "plugin": takes[0], "device": device, "dtype": job.dtype,
                   "shape": list(job.shape), "params": dict(job.params)}
            try:
                found = pool.request(takes[0], device, msg, timeout=120.0)
            except WorkerLost as lost:
                found = {"ok": False, "message": str(lost)}
            if not found.get("ok"):
                progress.note(f"skipped {op} {job.dtype} {job.shape}: {found.get('message')}")
                continue
            key = (job.dtype, tuple(found["bucket"]), found["flags"])
            lacking = [p for p in takes if (op, p, *key) not in held]
            if [p for p in lacking if p not in LAST]:
                first.append(Task(job, tuple(p for p in lacking if p not in LAST)))
            if [p for p in lacking if p in LAST]:
                last.append(Task(job, tuple(p for p in lacking if p in LAST)))
    return first + last


def warm_tasks(tasks: Sequence[Task], device: str, trials: int) -> list[dict[str, Any]]:
    """Warm-up requests (:mod:`kernelzoo.tuner.warm`) of the configs a search of ``trials`` measures first: the
    plugin's default config, then its tuning seeds; none of the ``LAST`` plugins, which compile nothing."""
    out = []
    for task in tasks:
        for plugin in task.plugins:
            if plugin in LAST:
                continue
            impl = registry.impl(task.job.op, plugin)
            configs: list[dict[str, Any]] = []
            for config in (impl.default_config, *(impl.config(seed) for seed in impl.tuning_seeds)):
                picked = {k: v for k, v in config.items() if k in impl.config_space}
                if picked not in configs and impl.in_space(picked):
                    configs.append(picked)
            out += [{"op": task.job.op, "plugin": plugin, "device": device, "dtype": task.job.dtype,
                     "shape": list(task.job.shape), "params": dict(task.job.params), "config": config}
                    for config in configs[:max(1, trials)]]
    return out


def tune_missing(store: Store, pool: WorkerPool, path: Path, *, device: str, ops: Sequence[str] | None = None,
                 plugins: Sequence[str] | None = None, options: TuneOptions | None = None,
                 progress: Progress | None = None, budget_s: float | None = None,
                 warmers: int | None = None) -> list[ShapeReport]:
    """Tune the pairs :func:`missing_tasks` finds, a key at a time, after ``warmers`` workers have compiled the
    configs the first ``trials`` of each measure (:func:`warm_tasks`); past ``budget_s`` seconds no further key
    is started (a rerun tunes the rest: what this run stored is no longer missing)."""
    progress = progress or Progress(enabled=False)
    start = time.monotonic()
    fp = device_fingerprint(pool, device)
    tasks = missing_tasks(store, pool, path, device, fp, ops, plugins, progress)
    pairs = sum(len(t.plugins) for t in tasks)
    progress.note(f"{path.name} lacks {pairs} (key, plugin) pair(s) on {fp.describe()}, in {len(tasks)} task(s)"
                  if tasks else f"kernelzoo: {path.name} lacks no (key, plugin) pair on {fp.describe()}")
    # a key's leaders re-timed only when close, as in tune --verify: most keys here hold one trial per plugin
    options = replace(options or TuneOptions(), clear=CLEAR)
    if warm(warm_tasks(tasks, device, options.trials), options.timeout_s, warmers):
        progress.note(f"compiled the configs to time side by side in {time.monotonic() - start:.0f} s")
    reports: list[ShapeReport] = []
    progress.plan(len(tasks), desc="filling", unit="keys")
    for n, task in enumerate(tasks):
        if budget_s is not None and time.monotonic() - start > budget_s:
            progress.note(f"the budget of {budget_s:g} s is spent: {len(tasks) - n} task(s) left "
                          f"({sum(len(t.plugins) for t in tasks[n:])} pair(s)); run the command again to tune them")
            break
        began = time.monotonic()
        job = task.job
        try:
            reports += tune_op(store, pool, job.op, device=device, plugins=list(task.plugins), shapes=[job.shape],
                               dtypes=[job.dtype], params=[job.params], options=options,
                               progress=NotesOnly(progress), fp=fp)
        except KernelzooError as exc:
            progress.note(f"skipped {task}: {exc}")
        progress.step(f"{task} in {time.monotonic() - began:.1f} s")
    progress.close()
    return reports
