"""Many tuners, one job: ``kernelzoo tune --devices 0,1`` / ``--workers N`` / ``--budget`` / ``--status``.

The command computes the job's keys and its name, creates it in the database (every host that runs the
same command joins the same job), and runs one fleet worker per device: in this process for one device,
else one process each, started as ``python -m kernelzoo.tuner.fleet``, with ``CUDA_VISIBLE_DEVICES``
naming its one GPU so that it times only on itself. A fleet worker learns its device's fingerprint, adds the
job's tasks for that fingerprint, then claims tasks (kernelzoo.tuner.jobs) until none is left, tuning
each with the same search as ``kernelzoo tune`` (kernelzoo.tuner.search) in its own trial workers.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from types import FrameType
from typing import Any

import torch

from kernelzoo.ceilings import Ceilings
from kernelzoo.db import records
from kernelzoo.db.ranking import pick_winner
from kernelzoo.db.records import Miss, Winner
from kernelzoo.db.store import Store, open_store
from kernelzoo.errors import ArgumentError, DatabaseError, KernelzooError
from kernelzoo.fingerprint import Fingerprint
from kernelzoo.registry import registry
from kernelzoo.table import format_table
from kernelzoo.tuner import jobs
from kernelzoo.tuner.jobs import Key, Task
from kernelzoo.tuner.pool import TrialResult, WorkerLost, WorkerPool
from kernelzoo.tuner.progress import Progress
from kernelzoo.tuner.search import Target, TuneOptions, search
from kernelzoo.tuner.tune import ceilings_for, device_fingerprint, key_axes, plugins_for

LEASE_S = 60.0  # a claim outlives a worker by at most this; renewed every third of it


@dataclass(frozen=True)
class FleetOptions:
    """How a fleet worker claims and when it stops."""

    lease_s: float = LEASE_S
    deadline: float | None = None  # epoch seconds: no task is claimed and no trial started after it
    floor_within: float | None = None  # percent: a key ends once a verified trial is this close to the floor


class BudgetSpent(Exception):
    """Raised in place of a trial once the deadline has passed: the search stops, its study keeps the rest."""


class FloorReached(Exception):
    """Raised in place of the next trial once one came within the set distance of the roofline floor."""


class _Guard:
    """The worker pool as the search sees it: each trial first checks the budget and the floor rule."""

    def __init__(self, pool: WorkerPool, fleet: FleetOptions, floor_ms: float | None) -> None:
        self.pool, self.fleet, self.floor_ms = pool, fleet, floor_ms
        self.best_ms: float | None = None

    def close_to_floor(self, ms: float | None) -> bool:
        if ms is None or self.floor_ms is None or self.fleet.floor_within is None:
            return False
        return ms <= self.floor_ms * (1 + self.fleet.floor_within / 100)

    def trial(self, plugin: str, device: str, msg: dict[str, Any]) -> TrialResult:
        if self.fleet.deadline is not None and time.time() >= self.fleet.deadline:
            raise BudgetSpent
        if self.close_to_floor(self.best_ms):
            raise FloorReached
        result = self.pool.trial(plugin, device, msg)
        if result.ok and result.timing is not None:
            ms = result.timing.median_ms
            self.best_ms = ms if self.best_ms is None else min(self.best_ms, ms)
        return result


class _Heartbeat:
    """Renews the lease of the task in hand every third of the lease, from a thread."""

    def __init__(self, store: Store, task: Task, owner: str, lease_s: float) -> None:
        self.store, self.task, self.owner, self.lease_s = store, task, owner, lease_s
        self.lost = False
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="kernelzoo-lease", daemon=True)

    def _run(self) -> None:
        while not self._stop.wait(self.lease_s / 3):
            try:
                self.lost = not jobs.renew(self.store, self.task, self.owner, self.lease_s)
            except DatabaseError:
                continue  # the next beat tries again; the lease outlasts two missed ones
            if self.lost:
                return

    def __enter__(self) -> _Heartbeat:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


def resolve_keys(op: str, device: str, *, plugins: Sequence[str] | None = None,
                 shapes: Sequence[tuple[int, ...]] | None = None,
                 dtypes: Sequence[str] | None = None) -> list[tuple[Key, list[str]]]:
    """The keys ``kernelzoo tune --op`` tunes on ``device`` (shape x params x dtype), each with its plugins."""
    names, shapes, dtype_names = key_axes(op, device, plugins, shapes, dtypes)
    params = list(getattr(registry.op(op), "variants", None) or ({},))
    return [(Key(op, dtype, tuple(shape), dict(kwargs)), names)
            for shape in shapes for kwargs in params for dtype in dtype_names]


def job_request(keys: Sequence[tuple[Key, Sequence[str]]], options: TuneOptions, *, pending: bool = False,
                pending_ops: Sequence[str] = (), plugins: Sequence[str] | None = None) -> dict[str, Any]:
    """What a job is: its keys (or the pending keys of each device), the tuning options and the kernels' source
    hashes (an edited kernel makes a new job). Its hash names the job."""
    used = {(k.op, p) for k, ps in keys for p in ps}
    return {"keys": [[k.text, list(ps)] for k, ps in keys], "pending": pending, "pending_ops": list(pending_ops),
            "plugins": list(plugins or ()), "options": dataclasses.asdict(options),
            "sources": sorted(f"{op}/{p}/{registry.impl(op, p).source_hash}" for op, p in used)}


def _device_keys(store: Store, request: Mapping[str, Any], device: str,
                 fp: Fingerprint) -> list[tuple[Key, list[str]]]:
    """The job's keys for this device: those listed, or this device's missed keys for a pending job."""
    if not request["pending"]:
        return [(Key.of(text), list(plugins)) for text, plugins in request["keys"]]
    ops = request["pending_ops"] or [None]
    out = []
    for miss in (m for op in ops for m in records.missed_keys(store, fp.hash, op)):
        if miss.op not in registry.ops:
            continue
        shape = registry.op(miss.op).parse_shape(miss.shape)
        out.append((Key(miss.op, miss.dtype, tuple(shape), dict(miss.params)),
                    plugins_for(miss.op, device, request["plugins"] or None)))
    return out


@dataclass
class WorkResult:
    """What one fleet worker did."""

    tasks: int = 0  # tasks it finished
    keys_stored: int = 0  # keys whose winners it stored (it finished their last task)
    stopped: bool = False  # the budget ran out


def work(store: Store, job_id: int, request: Mapping[str, Any], device: str, fleet: FleetOptions,
         progress: Progress | None = None, label: str = "") -> WorkResult:
    """Claim and tune this job's tasks on ``device`` until none is left or the budget has run out."""
    progress = progress or Progress(enabled=False)
    options = TuneOptions(**request["options"])
    owner = jobs.worker_name(device)
    out = WorkResult()
    with WorkerPool(options.timeout_s) as pool:
        listed = sorted({p for _, ps in request["keys"] for p in ps})
        pool.start(listed, device)  # their imports overlap
        fp = device_fingerprint(pool, device, *listed[:1])  # a pending job asks a worker of its own
        keys = _device_keys(store, request, device, fp)
        if not keys:
            return out
        jobs.add_tasks(store, job_id, fp.hash, keys)
        # the floor rule needs the device's ceilings: built in, stored, or measured once now
        ceilings = (ceilings_for(store, pool, fp, device, progress, *listed[:1])
                    if fleet.floor_within is not None else None)
        while True:
            if fleet.deadline is not None and time.time() >= fleet.deadline:
                out.stopped = True
                break
            task = jobs.claim(store, job_id, fp.hash, owner, fleet.lease_s)
            if task is None:
                if not jobs.unfinished(store, job_id, fp.hash):
                    break
                time.sleep(min(1.0, fleet.lease_s / 4))  # others hold the rest: wait for them or their leases
                continue
            with _Heartbeat(store, task, owner, fleet.lease_s):
                try:
                    ended = _run_task(store, pool, task, device, fp, options, fleet, ceilings, progress, owner,
                                      label)
                except BaseException:
                    with contextlib.suppress(DatabaseError):
                        jobs.release(store, task, owner, "the worker was interrupted")
                    raise
            if ended is None:
                out.stopped = True
                break
            out.tasks += 1
            if ended.stored:
                out.keys_stored += 1
                if request["pending"]:
                    w = ended.stored[0]
                    records.forget_miss(store, Miss(op=w.op, device=fp, dtype=w.dtype, bucket=w.bucket,
                                                    flags=w.flags, shape=w.shape))
    return out


def _run_task(store: Store, pool: WorkerPool, task: Task, device: str, fp: Fingerprint, options: TuneOptions,
              fleet: FleetOptions, ceilings: Ceilings | None, progress: Progress, owner: str,
              label: str) -> jobs.Finished | None:
    """Tune one (key, plugin) task; the finished task, or None if the budget ran out (the task is given back)."""
    key = task.key
    call = {"op": key.op, "device": device, "dtype": key.dtype, "shape": list(key.shape), "params": dict(key.params)}
    try:
        found = pool.request(task.plugin, device, {"cmd": "describe", "plugin": task.plugin, **call},
                             timeout=max(options.timeout_s, 120.0))
    except WorkerLost as lost:
        found = {"ok": False, "message": str(lost)}
    skipped = (found.get("message", "describe failed") if not found.get("ok") else found["supports"])
    if skipped is not None:
        return jobs.finish(store, task, owner, winner=None, state=jobs.SKIPPED, message=str(skipped))
    target = Target(op=key.op, plugin=task.plugin, device=device, dtype=key.dtype, shape=key.shape,
                    params=dict(key.params), fingerprint=fp, source_hash=found["source_hash"],
                    bucket=tuple(found["bucket"]), flags=found["flags"], shape_text=found["shape_text"],
                    config_space=found["config_space"], default_config=found.get("default_config", {}),
                    seed_configs=tuple(found.get("seed_configs", ())), code_files=dict(found.get("code_files") or {}))
    floor_ms = ceilings.floor_ms(found["flops"], found["bytes"], key.dtype) if ceilings is not None else None
    guard = _Guard(pool, fleet, floor_ms)
    text = f"{label}{key.describe()} {task.plugin}"
    try:
        result = search(store, guard, target, options,  # type: ignore[arg-type]  # the pool, guarded
                        lambda d, t, b: progress.update(text, d, t, b))
    except BudgetSpent:
        jobs.release(store, task, owner, "the budget ran out; its study resumes where it stopped")
        return None
    except FloorReached:  # the study keeps its trials: read its best without running more
        result = search(store, pool, target, dataclasses.replace(options, trials=0))
    winner = result.winner
    reached = winner is not None and guard.close_to_floor(winner.time_ms)
    rest = f"{task.plugin} came within {fleet.floor_within:g} % of the roofline floor" if reached else ""
    failed = f"{sum(result.failures.values())} failed trial(s); first: {result.first_failure}" if result.failures \
        else ""
    return jobs.finish(store, task, owner, winner=winner, message=failed, skip_rest=rest)


# --- the command ---------------------------------------------------------------------------------------------


def visible_gpus(spec: str) -> list[str]:
    """``--devices 0,1`` or ``all`` as CUDA_VISIBLE_DEVICES values, one per worker (indices count from the
    GPUs this process sees)."""
    count = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if count == 0:
        raise ArgumentError("--devices needs a GPU and torch sees none here; on the CPU use --workers N")
    seen = os.environ.get("CUDA_VISIBLE_DEVICES")
    names = [s.strip() for s in seen.split(",")][:count] if seen else [str(i) for i in range(count)]
    if spec.strip() == "all":
        return names
    try:
        picked = [int(s) for s in spec.split(",") if s.strip()]
    except ValueError:
        picked = []
    if not picked or any(not 0 <= i < count for i in picked) or len(set(picked)) != len(picked):
        raise ArgumentError(f"--devices must be 'all' or distinct GPU indices below {count} separated by commas, "
                            f"got {spec!r}")
    return [names[i] for i in picked]


def run(args: argparse.Namespace, store: Store, options: TuneOptions, progress: Progress) -> int:
    """``kernelzoo tune`` as a fleet job: create or join the job, run its workers here, report."""
    if args.devices:
        gpus, device = visible_gpus(args.devices), "cuda"
        if args.workers:
            raise ArgumentError("pass either --devices (one worker per GPU) or --workers (CPU processes)")
    else:
        gpus, device = [], args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    workers = len(gpus) if gpus else (args.workers or 1)
    if workers < 1:
        raise ArgumentError(f"--workers must be >= 1, got {workers}")
    ops = list(args.op or ())
    keys = []
    if not args.pending:
        for op in ops:
            spec = registry.op(op)
            shapes = [spec.parse_shape(s) for s in args.shape] if args.shape else None
            keys += resolve_keys(op, device, plugins=args.plugin, shapes=shapes, dtypes=args.dtype)
    request = job_request(keys, options, pending=args.pending, pending_ops=ops, plugins=args.plugin)
    job_id, name = jobs.open_job(store, request, args.job)
    fleet = FleetOptions(lease_s=args.lease, deadline=time.time() + args.budget if args.budget else None,
                         floor_within=args.floor_within)
    progress.note(f"job {name}: {len(keys) or 'the pending'} key(s) on {workers} worker(s) ({store.display_url})")
    if workers == 1:
        with _visible(gpus[0] if gpus else None):
            result = work(store, job_id, request, device, fleet, progress)
        codes = [0]
        stopped = result.stopped
    else:
        codes = _spawn(store.url, name, device, gpus or [None] * workers, fleet, progress)
        stopped = fleet.deadline is not None and time.time() >= fleet.deadline
    return _summary(store, name, codes, stopped, progress)


@contextlib.contextmanager
def _visible(gpu: str | None) -> Iterator[None]:
    """CUDA_VISIBLE_DEVICES for the trial workers started inside (this process never touches CUDA)."""
    if gpu is None:
        yield
        return
    before = os.environ.get("CUDA_VISIBLE_DEVICES")
    os.environ["CUDA_VISIBLE_DEVICES"] = gpu
    try:
        yield
    finally:
        if before is None:
            os.environ.pop("CUDA_VISIBLE_DEVICES", None)
        else:
            os.environ["CUDA_VISIBLE_DEVICES"] = before


def _spawn(url: str, name: str, device: str, gpus: Sequence[str | None], fleet: FleetOptions,
           progress: Progress) -> list[int]:
    """One fleet worker process per entry of ``gpus`` (None: a CPU worker); their exit codes."""
    procs = []
    for i, gpu in enumerate(gpus):
        env = dict(os.environ)
        if gpu is not None:
            env["CUDA_VISIBLE_DEVICES"] = gpu
        cmd = [sys.executable, "-m", "kernelzoo.tuner.fleet", "--db", url, "--job", name, "--device", device,
               "--lease", repr(fleet.lease_s), "--label", f"[{'gpu ' + gpu if gpu is not None else f'worker {i}'}] "]
        if fleet.deadline is not None:
            cmd += ["--deadline", repr(fleet.deadline)]
        if fleet.floor_within is not None:
            cmd += ["--floor-within", repr(fleet.floor_within)]
        if not progress.enabled:
            cmd.append("--quiet")
        procs.append(subprocess.Popen(cmd, env=env))
    try:
        return [p.wait() for p in procs]
    finally:
        for p in procs:  # interrupted: each worker gives its task back and exits
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for p in procs:
            with contextlib.suppress(subprocess.TimeoutExpired):
                p.wait(timeout=30)


def _summary(store: Store, name: str, codes: Sequence[int], stopped: bool, progress: Progress) -> int:
    state = jobs.status(store, name)
    assert state is not None, "the job was just opened"
    counts = state.counts()
    rows = []
    for k in state.keys:
        if k.state != "done":
            continue
        results = _key_winners(store, name, k)
        best = pick_winner(results, torch.device(_device_kind(results)).type, k.key.op) if results else None
        rows.append((k.key.describe(), best.plugin if best else "-", f"{best.time_ms:.4g}" if best else "-",
                     ", ".join(f"{p}: {s}" for p, s in sorted(k.plugins.items()))))
    if rows:
        print(format_table(("key", "winner", "ms", "plugins"), rows))
    died = [i for i, c in enumerate(codes) if c != 0]
    if died:
        print(f"kernelzoo: {len(died)} worker(s) ended with an error (exit codes {[codes[i] for i in died]}); "
              "their claims pass to the others when the leases run out", file=sys.stderr)
    line = (f"job {name}: {counts['done']} key(s) done, {counts['claimed']} claimed, {counts['left']} left"
            + (f"; {state.taken_over} task(s) taken over from a lost worker" if state.taken_over else ""))
    print(line)
    if counts["left"] or counts["claimed"]:
        if stopped:
            print("the budget ran out; run the same command again to resume the job")
            return 0
        return 1
    return 0


def _device_kind(results: Sequence[Winner]) -> str:
    return results[0].device.kind if results else "cpu"


def _key_winners(store: Store, name: str, key: jobs.KeyStatus) -> list[Winner]:
    """The stored winners of a done key of the job (those its tasks found)."""
    found = jobs.find_job(store, name)
    assert found is not None, "the job exists"
    return jobs.key_results(store, found[0], key.device_hash, key.key)


def show_status(store: Store, name: str | None, as_json: bool) -> int:
    """``kernelzoo tune --status``: the newest (or the named) job across the fleet."""
    state = jobs.status(store, name)
    if state is None:
        raise ArgumentError(f"no tuning job {'named ' + repr(name) + ' ' if name else ''}in {store.display_url}; "
                            "start one with kernelzoo tune --devices, --workers or --budget")
    if as_json:
        print(json.dumps(state.to_dict(), indent=2))
        return 0
    counts = state.counts()
    eta = "-" if state.eta_s is None else _duration(state.eta_s)
    print(f"job {state.name}: {counts['done']} key(s) done, {counts['claimed']} claimed, {counts['left']} left; "
          f"ETA {eta}")
    print("tasks: " + ", ".join(f"{n} {s}" for s, n in sorted(state.tasks.items())))
    print("workers: " + (", ".join(state.workers) if state.workers else "none holds a live claim"))
    rows = [(k.key.describe(), k.state, ", ".join(f"{p}: {s}" for p, s in sorted(k.plugins.items())))
            for k in state.keys]
    if rows:
        print(format_table(("key", "state", "plugins"), rows))
    return 0


def _duration(seconds: float) -> str:
    s = round(seconds)
    return f"{s // 3600}h {s % 3600 // 60}m" if s >= 3600 else f"{s // 60}m {s % 60}s" if s >= 60 else f"{s}s"


# --- a fleet worker process ----------------------------------------------------------------------------------


def _terminate(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m kernelzoo.tuner.fleet", description="one worker of a tuning job")
    p.add_argument("--db", required=True)
    p.add_argument("--job", required=True)
    p.add_argument("--device", required=True)
    p.add_argument("--lease", type=float, default=LEASE_S)
    p.add_argument("--deadline", type=float)
    p.add_argument("--floor-within", type=float)
    p.add_argument("--label", default="")
    p.add_argument("--quiet", action="store_true")
    args = p.parse_args(argv)
    signal.signal(signal.SIGTERM, _terminate)  # the pool closes its trial workers, the claim is given back
    try:
        registry.load()
        store = open_store(args.db)
        found = jobs.find_job(store, args.job)
        if found is None:
            raise ArgumentError(f"no tuning job named {args.job!r} in {store.display_url}")
        fleet = FleetOptions(lease_s=args.lease, deadline=args.deadline, floor_within=args.floor_within)
        work(store, found[0], found[2], args.device, fleet, Progress(enabled=not args.quiet), args.label)
    except KeyboardInterrupt:
        return 130
    except KernelzooError as exc:
        print(f"kernelzoo: {args.label}{exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
