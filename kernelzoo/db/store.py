"""Opening the tuning database: engines, SQLite settings, transactions, retries, other people's files.

SQLite runs in WAL mode (readers never wait for the writer) with a busy timeout, and every
write transaction begins with ``BEGIN IMMEDIATE``: it takes the write lock up front, so two
tuners never deadlock upgrading read locks. A write that still finds the file locked is
retried a bounded number of times.

kernelzoo writes only to a database it created or one that already holds its ``kz_`` tables.
A SQLite file is looked at before any setting touches it: a file that is not a SQLite
database, or another application's database, is refused and left exactly as it is. Only a
damaged kernelzoo database is renamed aside (``.corrupt-<time>``) and replaced. A file that
cannot be written (its permissions, its directory, a read-only mount) is opened read-only
(``mode=ro``, or ``immutable=1`` where SQLite could not even make its shared-memory file), so its
winners are still used.

Op calls read through :func:`open_reader`: a read-only connection with short busy, lock, statement
and connect timeouts, that creates nothing and never retries.
"""

from __future__ import annotations

import contextlib
import os
import random
import sqlite3
import threading
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import quote

from sqlalchemy import Engine, create_engine, event, inspect, make_url, text
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.orm import Session

from kernelzoo.db import as_url, default_url, schema
from kernelzoo.errors import DatabaseError

T = TypeVar("T")
BUSY_TIMEOUT_MS = 10_000
# Reads of op calls: they give up quickly and the call runs the default order (kernelzoo.db.lookup).
READ_BUSY_TIMEOUT_MS = 50
READ_CONNECT_TIMEOUT_S = 2  # libpq's smallest useful value: it rounds lower ones up to 2 s
READ_STATEMENT_TIMEOUT_MS = 1000
READ_LOCK_TIMEOUT_MS = 200
CONNECT_TIMEOUT_S = 10  # the tuner and the commands: an unreachable server is an error, not a hang
# Bounded retry of a write that found the database locked even after the busy timeout:
# 5 more tries, 0.1 s doubling (3.1 s in all, plus jitter) on top of each busy wait.
RETRIES = 5
SQLITE_HEADER = b"SQLite format 3\x00"
_CORRUPT = ("file is not a database", "malformed", "database corrupt", "not a database")
_LOCKED = ("database is locked", "database table is locked", "busy")
_READ_ONLY = ("readonly database", "read-only", "read only")
_ADVICE = "pass another one with --db PATH_OR_URL or KERNELZOO_DB"


class CorruptDatabase(DatabaseError):
    """A damaged kernelzoo SQLite database (it gets moved aside)."""


class NotADatabase(DatabaseError):
    """A file that is not a SQLite database, or a damaged one kernelzoo did not create; it is never touched."""


class ForeignDatabase(DatabaseError):
    """Another application's database: it holds tables, none of them kernelzoo's; it is never written."""


class NoDatabase(DatabaseError):
    """A read-only open of a SQLite file that does not exist (a lookup then finds no tuned winners)."""


class ReadOnlyDatabase(DatabaseError):
    """A write to a database opened read-only."""


class Store:
    """One tuning database: its engine, its schema state, and the one transaction helper.

    ``reader``: the op calls' read-only connection (see the module); it never creates the file.
    """

    def __init__(self, url: str, busy_timeout_ms: int | None = None, *, reader: bool = False) -> None:
        self.url = as_url(url)
        self.display_url = display_url(self.url)
        self.reader = reader
        self.retries = 0 if reader else RETRIES
        try:
            self.path = sqlite_path(self.url)
        except (SQLAlchemyError, ValueError) as exc:
            raise _bad_url(self.display_url, exc) from exc
        busy = busy_timeout_ms if busy_timeout_ms is not None else READ_BUSY_TIMEOUT_MS if reader else \
            BUSY_TIMEOUT_MS
        self.read_only, self.read_only_reason, self.immutable = reader, "", False
        if self.path is not None:
            if reader and not self.path.exists():
                raise NoDatabase(f"the tuning database {self.path} does not exist yet")
            if not reader:
                _prepare_directory(self.path)
            why = _read_only_reason(self.path)
            if why:
                self.read_only, self.read_only_reason = True, why
                # WAL needs a -shm file beside the database: where none can be made, SQLite must take the file as
                # unchanging (a read-only mount)
                self.immutable = not _writable_dir(self.path.parent)
            _classify(self.path, busy / 1000, self.immutable)
        try:
            self.engine = _engine(self, busy)
        except (SQLAlchemyError, ImportError, ValueError) as exc:  # a malformed URL, a missing driver
            raise _bad_url(self.display_url, exc) from exc
        self._writer = self.engine.execution_options(kz_write=True)
        self.inode = _inode(self.path)  # to tell our damaged file from a new one another process made
        self._current = False  # schema checked and current: a version never goes back
        self.warned: set[str] = set()  # warnings given once per database and process

    def transaction(self, fn: Callable[[Session], T], *, write: bool = False) -> T:
        """Run ``fn(session)`` in one transaction: commit, or roll back and raise DatabaseError."""
        if write and self.read_only:
            raise ReadOnlyDatabase(self.read_only_message())
        delay = 0.1
        for attempt in range(self.retries + 1):
            try:
                with Session(self._writer if write else self.engine, expire_on_commit=False) as session, \
                        session.begin():
                    return fn(session)
            except SQLAlchemyError as exc:
                message = " ".join(str(getattr(exc, "orig", None) or exc).split())  # a driver's lines, as one
                lower = message.lower()
                if any(s in lower for s in _CORRUPT):
                    raise CorruptDatabase(f"the tuning database {self.display_url} is damaged: {message}") from exc
                if attempt < self.retries and any(s in lower for s in _LOCKED):
                    time.sleep(delay * (1 + random.random()))  # jitter: two waiting tuners do not retry in step
                    delay *= 2
                    continue
                if any(s in lower for s in _READ_ONLY):
                    raise ReadOnlyDatabase(self.read_only_message(message)) from exc
                raise DatabaseError(f"tuning database {self.display_url}: {message}{_hint(lower)}") from exc
        raise AssertionError("unreachable")

    def read_only_message(self, detail: str = "") -> str:
        why = self.read_only_reason or detail or "opened read-only"
        return (f"the tuning database {self.display_url} is read-only ({why}): its winners are used, but nothing "
                f"can be stored in it; to tune, {_ADVICE} naming a writable file")

    def check_health(self) -> None:
        """Raise CorruptDatabase unless SQLite's quick check passes (it reads every page)."""
        if self.path is None:
            return
        rows = self.transaction(lambda s: [r[0] for r in s.execute(text("PRAGMA quick_check(1)"))])
        if rows != ["ok"]:
            raise CorruptDatabase(f"the tuning database {self.display_url} is damaged: {'; '.join(map(str, rows))}")

    def schema_state(self) -> schema.State:
        """What the database holds (reads only); ForeignDatabase if it holds other tables and none of kernelzoo's."""
        state = schema.inspect_state(self)
        if state.kind == "empty":
            names = self.transaction(lambda s: inspect(s.connection()).get_table_names())
            if names:
                raise ForeignDatabase(_foreign_message(self.display_url, names))
        return state

    def ensure_schema(self) -> None:
        """Create the tables in an empty database, upgrade an older one in place; raise DatabaseError unless the
        schema is then current."""
        if self._current:
            return
        state = self.schema_state()
        if state.kind in ("empty", "older"):
            if self.read_only:
                raise ReadOnlyDatabase(self.read_only_message())
            state = self.transaction(schema.create, write=True)
        schema.require(state, self.display_url)
        self._current = True

    def dispose(self) -> None:
        self.engine.dispose()


def _bad_url(shown: str, exc: Exception) -> DatabaseError:
    return DatabaseError(f"cannot open the tuning database {shown!r}: {exc}; expected a file path or a SQLAlchemy "
                         "URL such as sqlite:////path/tuning.sqlite or postgresql+psycopg://host/db")


def _hint(message: str) -> str:
    """What to do about a driver error, where it says something we recognise."""
    if "unable to open database file" in message:
        return f" (the file or its directory cannot be opened; {_ADVICE})"
    if any(s in message for s in ("connection refused", "timeout", "timed out", "could not connect",
                                  "could not translate host", "connection to server")):
        return " (the database server cannot be reached; start it, or check the host and port in the URL)"
    if any(s in message for s in _LOCKED):
        return " (another process holds the database's lock; try again when it has finished)"
    return ""


def _foreign_message(shown: str, names: list[str]) -> str:
    listed = ", ".join(sorted(names)[:5]) + (", ..." if len(names) > 5 else "")
    return (f"{shown} is another application's database (tables {listed}, none of kernelzoo's kz_ tables); "
            f"kernelzoo writes only to a database it created and left this one as it was: {_ADVICE}")


def display_url(url: str) -> str:
    """``url`` with its password hidden, for messages."""
    try:
        return make_url(url).render_as_string(hide_password=True)
    except (SQLAlchemyError, ValueError):
        return url if "@" not in url else "<a database URL that does not parse>"


def sqlite_path(url: str) -> Path | None:
    """The file of a SQLite URL (or plain path); None for other databases and in-memory SQLite."""
    parsed = make_url(as_url(url))
    if parsed.get_backend_name() != "sqlite" or parsed.database in (None, "", ":memory:"):
        return None
    return Path(parsed.database)


def _prepare_directory(path: Path) -> None:
    """Make the database's directory, or say in one line why it cannot be made."""
    for parent in (path.parent, *path.parent.parents):
        if parent.exists():
            if not parent.is_dir():
                raise DatabaseError(f"cannot create the tuning database {path}: {parent} is a file, not a "
                                    f"directory; {_ADVICE}")
            break
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise DatabaseError(f"cannot create the directory {path.parent} of the tuning database: "
                            f"{exc.strerror or exc}; {_ADVICE}") from None
    if path.is_dir():
        raise DatabaseError(f"the tuning database {path} is a directory, not a file; {_ADVICE}")


def _writable_dir(directory: Path) -> bool:
    try:
        return os.access(directory, os.W_OK) and not os.statvfs(directory).f_flag & os.ST_RDONLY
    except OSError:
        return False


def _read_only_reason(path: Path) -> str:
    """Why the SQLite file at ``path`` (or, where it does not exist, its directory) cannot be written; '' if it
    can."""
    try:
        if os.statvfs(path if path.exists() else path.parent).f_flag & os.ST_RDONLY:
            return "on a read-only file system"
    except OSError:
        return ""
    if path.exists() and not os.access(path, os.W_OK):
        return "the file is not writable"
    if path.exists() and not _writable_dir(path.parent):
        return f"its directory {path.parent} is not writable"
    return ""


def _sqlite_uri(path: Path, *, read_only: bool, immutable: bool) -> str:
    mode = "immutable=1" if immutable else "mode=ro" if read_only else "mode=rwc"
    return f"file:{quote(str(path))}?{mode}"


def _classify(path: Path, timeout_s: float, immutable: bool) -> None:
    """Raise unless ``path`` is absent, empty, or a kernelzoo database; it is read, never written.

    NotADatabase: not SQLite, or damaged and not kernelzoo's. ForeignDatabase: another application's tables.
    CorruptDatabase: a damaged kernelzoo database.
    """
    try:
        with open(path, "rb") as f:
            head = f.read(100)
    except FileNotFoundError:
        return
    except IsADirectoryError:
        raise DatabaseError(f"the tuning database {path} is a directory, not a file; {_ADVICE}") from None
    except OSError as exc:
        raise DatabaseError(f"cannot read the tuning database {path}: {exc.strerror or exc}; {_ADVICE}") from None
    if not head:
        return  # an empty file: SQLite takes it as an empty database
    if not head.startswith(SQLITE_HEADER):
        raise NotADatabase(f"{path} is not a SQLite database (it begins {head[:16]!r}); kernelzoo did not create it "
                           f"and left it as it is, neither renamed nor changed: {_ADVICE}")
    try:
        con = sqlite3.connect(_sqlite_uri(path, read_only=True, immutable=immutable), uri=True, timeout=timeout_s)
        try:
            names = [r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
        finally:
            con.close()
    except sqlite3.DatabaseError as exc:
        message = str(exc)
        if any(s in message.lower() for s in _LOCKED):
            raise DatabaseError(f"tuning database {path}: {message}{_hint(message.lower())}") from None
        if looks_like_kernelzoo(path):
            raise CorruptDatabase(f"the tuning database {path} is damaged: {message}") from None
        raise NotADatabase(f"{path} is a damaged SQLite database ({message}) that holds no kernelzoo tables; "
                           f"kernelzoo left it as it is: {_ADVICE}") from None
    if names and not any(n.startswith("kz_") for n in names):
        raise ForeignDatabase(_foreign_message(str(path), names))


def looks_like_kernelzoo(path: Path) -> bool:
    """Whether the SQLite file at ``path`` names kernelzoo's version table in its first pages (the schema lives
    there), so that a damaged file can be told to be kernelzoo's without SQLite reading it."""
    try:
        with open(path, "rb") as f:
            start = f.read(1 << 20)
    except OSError:
        return False
    return start.startswith(SQLITE_HEADER) and b"kz_schema_versions" in start


def _engine(store: Store, busy_timeout_ms: int) -> Engine:
    path = store.path
    if path is None:
        return create_engine(store.url, pool_pre_ping=True, connect_args=_server_args(store))
    if store.read_only:
        uri = _sqlite_uri(path, read_only=True, immutable=store.immutable)
        engine = create_engine("sqlite://", creator=lambda: sqlite3.connect(
            uri, uri=True, timeout=busy_timeout_ms / 1000, check_same_thread=False))
    else:
        engine = create_engine(store.url, connect_args={"timeout": busy_timeout_ms / 1000})

    @event.listens_for(engine, "connect")
    def _connect(dbapi_connection: Any, _record: Any) -> None:
        dbapi_connection.isolation_level = None  # we emit BEGIN ourselves (below)
        cursor = dbapi_connection.cursor()
        cursor.execute(f"PRAGMA busy_timeout = {int(busy_timeout_ms)}")
        if not store.read_only:  # settings that write the file: only on a file that is ours (see _classify)
            cursor.execute("PRAGMA journal_mode = WAL")
            cursor.execute("PRAGMA synchronous = NORMAL")  # WAL + NORMAL: durable across crashes of the process
        cursor.execute("PRAGMA foreign_keys = ON")
        cursor.close()

    @event.listens_for(engine, "begin")
    def _begin(connection: Any) -> None:
        write = connection.get_execution_options().get("kz_write", False)
        connection.exec_driver_sql("BEGIN IMMEDIATE" if write else "BEGIN")

    return engine


def _server_args(store: Store) -> dict[str, Any]:
    """Timeouts for a database server, where the driver is libpq's (psycopg, psycopg2): a connect timeout always;
    for the reader also statement and lock timeouts, and read-only transactions."""
    url = make_url(store.url)
    if url.get_backend_name() != "postgresql" or url.get_driver_name() not in ("psycopg", "psycopg2"):
        return {}
    if not store.reader:
        return {"connect_timeout": CONNECT_TIMEOUT_S}
    return {"connect_timeout": READ_CONNECT_TIMEOUT_S,
            "options": f"-c statement_timeout={READ_STATEMENT_TIMEOUT_MS} -c lock_timeout={READ_LOCK_TIMEOUT_MS} "
                       "-c default_transaction_read_only=on"}


_stores: dict[str, Store] = {}
_readers: dict[str, Store] = {}
_lock = threading.Lock()


def open_store(url: str | None = None, *, check: bool = False, write: bool = False) -> Store:
    """The database at ``url`` (a URL or a file path; default: :func:`kernelzoo.db.default_url`), opened once per
    process, its tables created if it is new.

    ``check`` runs SQLite's quick check first (it reads the whole file, so the tuner does,
    an op call does not). A damaged kernelzoo file is replaced (:func:`replace_damaged`).
    Raises DatabaseError when the database cannot be opened, is not kernelzoo's, or its schema version does
    not fit. A read-only database opens (for reading) if its tables exist; with ``write`` (the tuner) it is
    refused at once, before any work whose results could not be stored.
    """
    url = as_url(url or default_url())
    try:
        with _lock:
            store = _stores.get(url)
            if store is None:
                store = _stores[url] = Store(url)
        if check:
            store.check_health()
        store.ensure_schema()
    except CorruptDatabase as exc:
        store = replace_damaged(_stores.get(url), exc, url)
    if write and store.read_only:
        raise ReadOnlyDatabase(store.read_only_message())
    return store


def open_reader(url: str) -> Store:
    """The read-only connection of op calls to the database at ``url``: schema checked, nothing created.

    NoDatabase while the file does not exist; DatabaseError when it cannot be read or is not a current kernelzoo
    database. An empty database is returned as it is (``schema_state().kind == 'empty'``).
    """
    url = as_url(url)
    with _lock:
        store = _readers.get(url)
    if store is None:
        store = Store(url, reader=True)
        with _lock:
            store = _readers.setdefault(url, store)
    return store


def replace_damaged(store: Store | None, exc: CorruptDatabase, url: str | None = None) -> Store:
    """Move a damaged kernelzoo SQLite file (and its WAL) aside, warn where to, and open a new database there.

    A file that does not look like kernelzoo's is never moved: ``exc`` is raised as NotADatabase."""
    url = store.url if store is not None else as_url(url or default_url())
    path = sqlite_path(url)
    if path is None:
        raise exc
    if path.exists() and not looks_like_kernelzoo(path):
        raise NotADatabase(f"{exc}; it does not look like a kernelzoo database, so it was left as it is: {_ADVICE}")
    with _lock:
        if store is not None:
            store.dispose()
        _stores.pop(url, None)
        reader = _readers.pop(url, None)
        if reader is not None:
            reader.dispose()
        moved = _move_aside(path, store.inode if store is not None else _inode(path))
        warnings.warn(f"kernelzoo: {exc}; moved it to {moved} and started a new one", RuntimeWarning, stacklevel=3)
        fresh = _stores[url] = Store(url)
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
        for store in (*_stores.values(), *_readers.values()):
            store.dispose()
        _stores.clear()
        _readers.clear()


def _after_fork_in_child() -> None:
    # A forked child must not use its parent's SQLite connections, nor a lock a parent thread held.
    global _lock
    _lock = threading.Lock()
    for store in (*_stores.values(), *_readers.values()):
        store.engine.dispose(close=False)
    _stores.clear()
    _readers.clear()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)
