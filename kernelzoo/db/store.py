"""Opening the tuning database: engines, SQLite settings, transactions, retries, corrupt files.

SQLite runs in WAL mode (readers never wait for the writer) with a busy timeout, and every
write transaction begins with ``BEGIN IMMEDIATE``: it takes the write lock up front, so two
tuners never deadlock upgrading read locks. A write that still finds the file locked is
retried a bounded number of times. A file that is not a database, or a damaged one, is
renamed aside with a ``.corrupt-<time>`` suffix and a new database is created.
"""

from __future__ import annotations

import contextlib
import os
import random
import threading
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from sqlalchemy import Engine, create_engine, event, make_url, text
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.orm import Session

from kernelzoo.db import default_url, schema
from kernelzoo.errors import DatabaseError

T = TypeVar("T")
BUSY_TIMEOUT_MS = 10_000
# Bounded retry of a write that found the database locked even after the busy timeout:
# 5 more tries, 0.1 s doubling (3.1 s in all, plus jitter) on top of each busy wait.
RETRIES = 5
_CORRUPT = ("file is not a database", "malformed", "database corrupt", "not a database")
_LOCKED = ("database is locked", "database table is locked", "busy")


class CorruptDatabase(DatabaseError):
    """A SQLite file that is not a database or is damaged (it gets moved aside)."""


class Store:
    """One tuning database: its engine, its schema state, and the one transaction helper."""

    def __init__(self, url: str, busy_timeout_ms: int | None = None) -> None:
        self.url = url
        self.display_url = display_url(url)
        try:
            self.path = sqlite_path(url)
            self.engine = _engine(url, BUSY_TIMEOUT_MS if busy_timeout_ms is None else busy_timeout_ms)
        except (SQLAlchemyError, ImportError, ValueError) as exc:  # a malformed URL, a missing driver
            raise DatabaseError(f"cannot open the tuning database {self.display_url!r}: {exc}; expected a "
                                "SQLAlchemy URL such as sqlite:////path/tuning.sqlite or postgresql://host/db") from exc
        self._writer = self.engine.execution_options(kz_write=True)
        self.inode = _inode(self.path)  # to tell our damaged file from a new one another process made
        self._current = False  # schema checked and current: a version never goes back

    def transaction(self, fn: Callable[[Session], T], *, write: bool = False) -> T:
        """Run ``fn(session)`` in one transaction: commit, or roll back and raise DatabaseError."""
        delay = 0.1
        for attempt in range(RETRIES + 1):
            try:
                with Session(self._writer if write else self.engine, expire_on_commit=False) as session, \
                        session.begin():
                    return fn(session)
            except SQLAlchemyError as exc:
                message = str(getattr(exc, "orig", None) or exc)
                if any(s in message.lower() for s in _CORRUPT):
                    raise CorruptDatabase(f"the tuning database {self.display_url} is damaged: {message}") from exc
                if attempt < RETRIES and any(s in message.lower() for s in _LOCKED):
                    time.sleep(delay * (1 + random.random()))  # jitter: two waiting tuners do not retry in step
                    delay *= 2
                    continue
                raise DatabaseError(f"tuning database {self.display_url}: {message}") from exc
        raise AssertionError("unreachable")

    def check_health(self) -> None:
        """Raise CorruptDatabase unless SQLite's quick check passes (it reads every page)."""
        if self.path is None:
            return
        rows = self.transaction(lambda s: [r[0] for r in s.execute(text("PRAGMA quick_check(1)"))])
        if rows != ["ok"]:
            raise CorruptDatabase(f"the tuning database {self.display_url} is damaged: {'; '.join(map(str, rows))}")

    def ensure_schema(self) -> None:
        """Create the tables in an empty database, upgrade an older one in place; raise DatabaseError unless the
        schema is then current."""
        if self._current:
            return
        state = schema.inspect_state(self)
        if state.kind in ("empty", "older"):
            state = self.transaction(schema.create, write=True)
        schema.require(state, self.display_url)
        self._current = True

    def dispose(self) -> None:
        self.engine.dispose()


def display_url(url: str) -> str:
    """``url`` with its password hidden, for messages."""
    try:
        return make_url(url).render_as_string(hide_password=True)
    except (SQLAlchemyError, ValueError):
        return url if "@" not in url else "<a database URL that does not parse>"


def sqlite_path(url: str) -> Path | None:
    """The file of a SQLite URL; None for other databases and in-memory SQLite."""
    parsed = make_url(url)
    if parsed.get_backend_name() != "sqlite" or parsed.database in (None, "", ":memory:"):
        return None
    return Path(parsed.database)


def _engine(url: str, busy_timeout_ms: int) -> Engine:
    path = sqlite_path(url)
    if path is None:
        return create_engine(url, pool_pre_ping=True)
    path.parent.mkdir(parents=True, exist_ok=True)
    engine = create_engine(url, connect_args={"timeout": busy_timeout_ms / 1000})

    @event.listens_for(engine, "connect")
    def _connect(dbapi_connection: Any, _record: Any) -> None:
        dbapi_connection.isolation_level = None  # we emit BEGIN ourselves (below)
        cursor = dbapi_connection.cursor()
        cursor.execute(f"PRAGMA busy_timeout = {int(busy_timeout_ms)}")
        cursor.execute("PRAGMA journal_mode = WAL")
        cursor.execute("PRAGMA synchronous = NORMAL")  # WAL + NORMAL: durable across crashes of the process
        cursor.execute("PRAGMA foreign_keys = ON")
        cursor.close()

    @event.listens_for(engine, "begin")
    def _begin(connection: Any) -> None:
        write = connection.get_execution_options().get("kz_write", False)
        connection.exec_driver_sql("BEGIN IMMEDIATE" if write else "BEGIN")

    return engine


_stores: dict[str, Store] = {}
_lock = threading.Lock()


def open_store(url: str | None = None, *, check: bool = False) -> Store:
    """The database at ``url`` (default: :func:`kernelzoo.db.default_url`), opened once per process.

    ``check`` runs SQLite's quick check first (~75 ms on a 25 MB database: the tuner does,
    an op call does not). A SQLite file found damaged is replaced (:func:`replace_damaged`).
    Raises DatabaseError when the database cannot be opened or its schema version does not fit.
    """
    url = url or default_url()
    with _lock:
        store = _stores.get(url)
        if store is None:
            store = _stores[url] = Store(url)
    try:
        if check:
            store.check_health()
        store.ensure_schema()
    except CorruptDatabase as exc:
        store = replace_damaged(store, exc)
    return store


def replace_damaged(store: Store, exc: CorruptDatabase) -> Store:
    """Move the damaged SQLite file of ``store`` (and its WAL) aside, warn, and open a new database there."""
    if store.path is None:
        raise exc
    with _lock:
        store.dispose()
        moved = _move_aside(store.path, store.inode)
        warnings.warn(f"kernelzoo: {exc}; moved it to {moved} and started a new one", RuntimeWarning, stacklevel=3)
        fresh = _stores[store.url] = Store(store.url)
    fresh.ensure_schema()
    return fresh


def _inode(path: Path | None) -> int | None:
    try:
        return path.stat().st_ino if path is not None else None
    except OSError:
        return None


def _move_aside(path: Path, inode: int | None) -> Path:
    """Rename the damaged file (and its WAL) aside, unless another process already replaced it."""
    target = path.with_name(f"{path.name}.corrupt-{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}")
    if inode is not None and _inode(path) not in (inode, None):
        return target  # another process moved it and made a new one: keep theirs
    for suffix in ("", "-wal", "-shm"):
        with contextlib.suppress(FileNotFoundError):
            os.replace(f"{path}{suffix}", f"{target}{suffix}")
    return target


def forget_stores() -> None:
    """Close and drop the engines opened in this process (tests, and after the database moved)."""
    with _lock:
        for store in _stores.values():
            store.dispose()
        _stores.clear()


def _after_fork_in_child() -> None:
    # A forked child must not use its parent's SQLite connections, nor a lock a parent thread held.
    global _lock
    _lock = threading.Lock()
    for store in _stores.values():
        store.engine.dispose(close=False)
    _stores.clear()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)
