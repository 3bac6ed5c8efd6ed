"""Tuning jobs shared through the database: (key, plugin) tasks claimed with a lease and a heartbeat.

A job is a list of tasks, one per (op, dtype, shape, params, plugin) and device fingerprint, so only
devices that share a fingerprint share a task (and its Optuna study). A worker claims one task at a time:
on PostgreSQL with ``SELECT ... FOR UPDATE SKIP LOCKED``, on SQLite inside ``BEGIN IMMEDIATE`` (the
store's write transactions), so no two workers hold a task at once. A claim lasts ``lease_s`` seconds and
the worker renews it while it tunes; a worker that dies stops renewing, and once the lease has run out
another worker takes the task over and resumes its study. The tables are kernelzoo's, beside the
versioned ones, and are created when a job first needs them.
"""

from __future__ import annotations

import hashlib
import json
import os
import socket
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import JSON, Float, ForeignKey, Integer, String, UniqueConstraint, inspect, select, text, update
from sqlalchemy.orm import DeclarativeBase, Mapped, Session, mapped_column

from kernelzoo.db.records import Winner, put_winner
from kernelzoo.db.store import Store
from kernelzoo.db.transfer import from_record, to_record
from kernelzoo.errors import ArgumentError

PENDING, CLAIMED, DONE, SKIPPED = "pending", "claimed", "done", "skipped"
FINAL = (DONE, SKIPPED)
# one lock id for creating the job tables and a job's tasks on PostgreSQL (SQLite: BEGIN IMMEDIATE)
_PG_LOCK = 0x6B7A_6A6F


class JobsBase(DeclarativeBase):
    pass


class JobModel(JobsBase):
    """One tuning job: what was asked for, under a name every host that asks the same computes."""

    __tablename__ = "kz_jobs"
    job_id: Mapped[int] = mapped_column(Integer, primary_key=True)
    name: Mapped[str] = mapped_column(String(64), unique=True)
    request: Mapped[dict[str, Any]] = mapped_column(JSON)  # ops, shapes, dtypes, plugins, tuning options
    created_at: Mapped[float] = mapped_column(Float)  # epoch seconds


class TaskModel(JobsBase):
    """One plugin on one key of a job, for the devices of one fingerprint."""

    __tablename__ = "kz_tasks"
    __table_args__ = (UniqueConstraint("job_id", "device_hash", "key", "plugin"),)
    task_id: Mapped[int] = mapped_column(Integer, primary_key=True)
    job_id: Mapped[int] = mapped_column(ForeignKey("kz_jobs.job_id", ondelete="CASCADE"), index=True)
    device_hash: Mapped[str] = mapped_column(String(32))
    key: Mapped[str] = mapped_column(String(1024))  # op, dtype, shape and params as JSON: the call tuned
    op: Mapped[str] = mapped_column(String(128))
    plugin: Mapped[str] = mapped_column(String(128))
    state: Mapped[str] = mapped_column(String(16), default=PENDING)
    owner: Mapped[str | None] = mapped_column(String(256), nullable=True)  # host:pid:device of the claimant
    lease_until: Mapped[float | None] = mapped_column(Float, nullable=True)  # epoch seconds
    attempts: Mapped[int] = mapped_column(Integer, default=0)  # claims so far (more than 1: taken over)
    started_at: Mapped[float | None] = mapped_column(Float, nullable=True)
    finished_at: Mapped[float | None] = mapped_column(Float, nullable=True)
    result: Mapped[dict[str, Any] | None] = mapped_column(JSON, nullable=True)  # the plugin's winner record
    message: Mapped[str] = mapped_column(String(2000), default="")


@dataclass(frozen=True)
class Key:
    """A call to tune: the op, dtype, shape and keyword arguments, and the plugins to compare on it."""

    op: str
    dtype: str
    shape: tuple[int, ...]
    params: Mapping[str, Any] = field(default_factory=dict)

    @property
    def text(self) -> str:
        return json.dumps({"op": self.op, "dtype": self.dtype, "shape": list(self.shape),
                           "params": dict(self.params)}, sort_keys=True, default=repr)

    @classmethod
    def of(cls, text_: str) -> Key:
        d = json.loads(text_)
        return cls(d["op"], d["dtype"], tuple(d["shape"]), d["params"])

    def describe(self) -> str:
        shape = "x".join(map(str, self.shape))
        extra = "".join(f" {k}={v}" for k, v in sorted(self.params.items()))
        return f"{self.op} {self.dtype} {shape}{extra}"


@dataclass(frozen=True)
class Task:
    """A claimed task, as the worker that holds it sees it."""

    task_id: int
    job_id: int
    device_hash: str
    key: Key
    plugin: str
    attempts: int


def worker_name(device: str) -> str:
    """Who holds a claim, readable in ``tune --status``: host, process id and device."""
    return f"{socket.gethostname()}:{os.getpid()}:{device}"


def job_name(request: Mapping[str, Any]) -> str:
    """The name of the job of ``request``: the same on every host that asks for the same tuning."""
    return hashlib.sha256(json.dumps(request, sort_keys=True, default=repr).encode()).hexdigest()[:16]


def _lock(session: Session) -> None:
    """Serialise job and table creation: SQLite's write transactions already are (BEGIN IMMEDIATE)."""
    if session.get_bind().dialect.name == "postgresql":
        session.execute(text("SELECT pg_advisory_xact_lock(:id)"), {"id": _PG_LOCK})


def ensure_tables(store: Store) -> None:
    """Create the job tables where they are absent (every host may try at once: one does it)."""

    def create(session: Session) -> None:
        _lock(session)
        JobsBase.metadata.create_all(session.connection(), checkfirst=True)

    store.transaction(create, write=True)


def open_job(store: Store, request: Mapping[str, Any], name: str | None = None) -> tuple[int, str]:
    """The job of ``request`` (named ``name``, else by the request's hash), created if absent; (id, name)."""
    ensure_tables(store)
    name = name or job_name(request)

    def get(session: Session) -> tuple[int, str]:
        _lock(session)
        found = session.execute(select(JobModel).where(JobModel.name == name)).scalar_one_or_none()
        if found is None:
            found = JobModel(name=name, request=dict(request), created_at=time.time())
            session.add(found)
            session.flush()
        return found.job_id, found.name

    return store.transaction(get, write=True)


def find_job(store: Store, name: str | None = None) -> tuple[int, str, dict[str, Any]] | None:
    """The job named ``name``, else the newest one; (id, name, request), or None if there is none (reads only)."""
    query = select(JobModel).order_by(JobModel.created_at.desc(), JobModel.job_id.desc()).limit(1)
    if name is not None:
        query = select(JobModel).where(JobModel.name == name)

    def read(session: Session) -> tuple[int, str, dict[str, Any]] | None:
        if not inspect(session.connection()).has_table(JobModel.__tablename__):
            return None
        job = session.execute(query).scalar_one_or_none()
        return None if job is None else (job.job_id, job.name, dict(job.request))

    return store.transaction(read)


def add_tasks(store: Store, job_id: int, device_hash: str, keys: Iterable[tuple[Key, Sequence[str]]]) -> int:
    """Add the tasks of ``keys`` (each with its plugins) for one fingerprint, those absent only; how many."""
    wanted = [(key, plugin) for key, plugins in keys for plugin in plugins]

    def add(session: Session) -> int:
        _lock(session)
        have = {(k, p) for k, p in session.execute(select(TaskModel.key, TaskModel.plugin).where(
            TaskModel.job_id == job_id, TaskModel.device_hash == device_hash))}
        new = [TaskModel(job_id=job_id, device_hash=device_hash, key=key.text, op=key.op, plugin=plugin,
                         state=PENDING, attempts=0, message="")
               for key, plugin in wanted if (key.text, plugin) not in have]
        session.add_all(new)
        return len(new)

    return store.transaction(add, write=True)


def claim(store: Store, job_id: int, device_hash: str, owner: str, lease_s: float) -> Task | None:
    """Take the first task of the job for this fingerprint that is pending or whose lease has run out."""

    def take(session: Session) -> Task | None:
        now = time.time()
        row = session.execute(
            select(TaskModel).where(
                TaskModel.job_id == job_id, TaskModel.device_hash == device_hash,
                (TaskModel.state == PENDING) | ((TaskModel.state == CLAIMED) & (TaskModel.lease_until < now)))
            .order_by(TaskModel.task_id).limit(1).with_for_update(skip_locked=True)).scalar_one_or_none()
        if row is None:
            return None
        row.state, row.owner, row.lease_until = CLAIMED, owner, now + lease_s
        row.attempts += 1
        row.started_at = now
        return Task(row.task_id, row.job_id, row.device_hash, Key.of(row.key), row.plugin, row.attempts)

    return store.transaction(take, write=True)


def renew(store: Store, task: Task, owner: str, lease_s: float) -> bool:
    """Extend the lease of a task this worker holds; False if it is no longer this worker's."""
    stmt = (update(TaskModel).where(TaskModel.task_id == task.task_id, TaskModel.owner == owner,
                                    TaskModel.state == CLAIMED).values(lease_until=time.time() + lease_s))
    return store.transaction(lambda s: s.execute(stmt).rowcount == 1, write=True)


def release(store: Store, task: Task, owner: str, message: str = "") -> None:
    """Give a task back unfinished (the budget ran out): another worker, or a rerun, resumes its study."""
    stmt = (update(TaskModel).where(TaskModel.task_id == task.task_id, TaskModel.owner == owner,
                                    TaskModel.state == CLAIMED)
            .values(state=PENDING, owner=None, lease_until=None, message=message[:2000]))
    store.transaction(lambda s: s.execute(stmt), write=True)


@dataclass(frozen=True)
class Finished:
    """What finishing a task did: whether the claim was still ours, and the winners stored with its key."""

    recorded: bool
    stored: tuple[Winner, ...] = ()


def finish(store: Store, task: Task, owner: str, *, winner: Winner | None, state: str = DONE, message: str = "",
           skip_rest: str = "") -> Finished:
    """Mark ``task`` done (or skipped) with its plugin's winner. When that ends the last task of its key, the
    key's winners are stored together, in the same transaction: a key is never stored with some of its plugins
    compared and others not. ``skip_rest`` (a reason) skips the key's tasks that nobody has started yet."""

    def end(session: Session) -> Finished:
        rows = session.execute(
            select(TaskModel).where(TaskModel.job_id == task.job_id, TaskModel.device_hash == task.device_hash,
                                    TaskModel.key == task.key.text)
            .order_by(TaskModel.task_id).with_for_update()).scalars().all()
        mine = next(r for r in rows if r.task_id == task.task_id)
        if mine.state in FINAL:  # our lease ran out and another worker finished it: its result stands
            return Finished(False)
        mine.state, mine.owner, mine.lease_until, mine.finished_at = state, owner, None, time.time()
        mine.result = to_record(winner) if winner is not None else None
        mine.message = message[:2000]
        if skip_rest:
            for r in rows:
                if r.state == PENDING:
                    r.state, r.finished_at, r.message = SKIPPED, time.time(), skip_rest[:2000]
        if any(r.state not in FINAL for r in rows):
            return Finished(True)
        stored = tuple(from_record(r.result, f"task {r.task_id}") for r in rows if r.result is not None)
        for w in stored:
            put_winner(session, w)
        return Finished(True, stored)

    return store.transaction(end, write=True)


@dataclass
class KeyStatus:
    key: Key
    device_hash: str
    state: str  # done, claimed, left
    plugins: dict[str, str]  # plugin -> task state


@dataclass
class JobStatus:
    """A job across the fleet: its keys done, claimed and left, who works on it, and the time left."""

    name: str
    request: dict[str, Any]
    keys: list[KeyStatus]
    tasks: dict[str, int]  # state -> tasks (claims whose lease ran out count as 'stale')
    workers: list[str]  # owners of live claims
    taken_over: int  # tasks claimed more than once
    eta_s: float | None  # seconds left at the pace of the finished tasks, over the live workers
    created_at: float

    def counts(self) -> dict[str, int]:
        out = {"done": 0, "claimed": 0, "left": 0}
        for k in self.keys:
            out[k.state] += 1
        return out

    def to_dict(self) -> dict[str, Any]:
        return {"job": self.name, "request": self.request, "keys": self.counts(), "tasks": self.tasks,
                "workers": self.workers, "taken_over": self.taken_over, "eta_s": self.eta_s,
                "created_at": self.created_at,
                "by_key": [{"key": k.key.describe(), "device_hash": k.device_hash, "state": k.state,
                            "plugins": k.plugins} for k in self.keys]}


def status(store: Store, name: str | None = None) -> JobStatus | None:
    """The state of job ``name`` (else the newest job), or None if the database holds no job."""
    found = find_job(store, name)
    if found is None:
        return None
    job_id, job, request = found

    def read(session: Session) -> tuple[list[TaskModel], float]:
        rows = session.execute(select(TaskModel).where(TaskModel.job_id == job_id)
                               .order_by(TaskModel.task_id)).scalars().all()
        created = session.execute(select(JobModel.created_at).where(JobModel.job_id == job_id)).scalar_one()
        return list(rows), created

    rows, created = store.transaction(read)
    now = time.time()
    tasks: dict[str, int] = {}
    workers: set[str] = set()
    by_key: dict[tuple[str, str], KeyStatus] = {}
    durations = []
    for r in rows:
        live = r.state == CLAIMED and r.lease_until is not None and r.lease_until >= now
        state = "stale" if r.state == CLAIMED and not live else r.state
        tasks[state] = tasks.get(state, 0) + 1
        if live and r.owner:
            workers.add(r.owner)
        if r.state == DONE and r.started_at is not None and r.finished_at is not None:
            durations.append(r.finished_at - r.started_at)
        ks = by_key.setdefault((r.device_hash, r.key), KeyStatus(Key.of(r.key), r.device_hash, "", {}))
        ks.plugins[r.plugin] = state
    for ks in by_key.values():
        states = set(ks.plugins.values())
        ks.state = "done" if states <= set(FINAL) else "claimed" if CLAIMED in states else "left"
    left = sum(n for s, n in tasks.items() if s not in FINAL)
    eta = (sum(durations) / len(durations) * left / max(1, len(workers))) if durations else None
    return JobStatus(job, request, list(by_key.values()), tasks, sorted(workers),
                     sum(1 for r in rows if r.attempts > 1), 0.0 if left == 0 else eta, created)


def parse_duration(text_: str) -> float:
    """'90', '90s', '10m', '1.5h' -> seconds; ArgumentError for anything else."""
    units = {"s": 1.0, "m": 60.0, "h": 3600.0}
    body, unit = (text_[:-1], text_[-1]) if text_ and text_[-1] in units else (text_, "s")
    try:
        seconds = float(body) * units[unit]
    except ValueError:
        seconds = -1.0
    if not seconds > 0:
        raise ArgumentError(f"--budget must be a positive duration such as 600, 90s, 10m or 1.5h; got {text_!r}")
    return seconds


def unfinished(store: Store, job_id: int, device_hash: str) -> int:
    """Tasks of the job for this fingerprint that are neither done nor skipped (claimed ones included)."""
    query = select(TaskModel.task_id).where(TaskModel.job_id == job_id, TaskModel.device_hash == device_hash,
                                            TaskModel.state.not_in(FINAL))
    return store.transaction(lambda s: len(s.execute(query).all()))


def key_results(store: Store, job_id: int, device_hash: str, key: Key) -> list[Winner]:
    """The plugins' winners that the finished tasks of one key of a job found."""
    query = select(TaskModel.task_id, TaskModel.result).where(
        TaskModel.job_id == job_id, TaskModel.device_hash == device_hash, TaskModel.key == key.text,
        TaskModel.state == DONE)
    return store.transaction(lambda s: [from_record(r, f"task {i}") for i, r in s.execute(query) if r is not None])
