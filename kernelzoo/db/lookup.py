"""The winner source dispatch asks once per key: exact bucket, else the nearest tuned bucket.

An op call never writes and never waits long on the database:

- Winners are read through a read-only connection with short timeouts (:func:`store.open_reader`),
  on a background thread; a call waits at most 0.1 s for it (``$KERNELZOO_DB_WAIT_MS`` sets
  another bound: a host so loaded that a local read takes longer may want one). Past that, or when the
  database cannot be read, the call runs the default order, one warning says why, and a later
  call uses the winners once the read has finished (or tries again after :data:`RETRY_S`).
- The shipped winners (``tuning_db/*.json``) of this hardware are read from their files where
  the database has no row of that plugin and key; ``kernelzoo.db.import_shipped()`` stores them.
- Keys without an exact winner are kept in memory, once per process, and written by
  ``kernelzoo.db.flush_misses()``, which also runs at exit (waiting at most a few seconds).
- A row is data: one that does not parse, or whose config is not in its plugin's space, is
  skipped with one warning (``kernelzoo doctor`` lists them).

Dispatch caches what this returns per key, so the database is read once per (op, device,
dtype, flags) group and process. Nothing here touches the database before the first op call.
"""

from __future__ import annotations

import atexit
import json
import math
import os
import threading
import time
import warnings
from collections.abc import Mapping
from concurrent.futures import Future, wait
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from kernelzoo import dispatch
from kernelzoo.db import default_url
from kernelzoo.db.ranking import config_problem, pick_winner
from kernelzoo.dispatch import Choice, plugin_order
from kernelzoo.errors import DatabaseError, KernelzooError
from kernelzoo.fingerprint import Fingerprint, fingerprint
from kernelzoo.registry import Call, Op, dtype_name, registry

if TYPE_CHECKING:
    from kernelzoo.db.records import Miss, Winner

WAIT_ENV = "KERNELZOO_DB_WAIT_MS"  # the most an op call waits for the database, in ms (default 100)
WAIT_S = 0.1
RETRY_S = 30.0  # after a failed read, calls run the default order this long before the next try
EXIT_FLUSH_S = 3.0  # the most the interpreter's exit waits to record missed keys
# stacklevel of the warnings: about the caller of kernelzoo.explain, or kernelzoo.ops' wrapper for an op call
_STACKLEVEL = 7


def _params(call: Call) -> dict[str, Any]:
    """The call's keyword arguments if they are JSON (Op.example takes them back), else none."""
    try:
        return json.loads(json.dumps(call.params))
    except (TypeError, ValueError):
        return {}


def wait_s() -> float:
    """How long an op call waits for the database: ``$KERNELZOO_DB_WAIT_MS``, else :data:`WAIT_S`."""
    try:
        return max(0.0, float(os.environ[WAIT_ENV]) / 1000)
    except (KeyError, ValueError):
        return WAIT_S


def _why(exc: BaseException) -> str:
    return str(exc) if isinstance(exc, (KernelzooError, OSError)) else f"{type(exc).__name__}: {exc}"


def _shown(url: str) -> str:
    from kernelzoo.db.store import display_url

    return display_url(url)


class WinnerLookup:
    """Callable ``(op, call, plugin) -> Choice | None`` over the database at :func:`kernelzoo.db.default_url`."""

    def __init__(self) -> None:
        self._after_fork()
        self._missed: set[tuple] = set()
        atexit.register(self.flush_misses, EXIT_FLUSH_S)
        if hasattr(os, "register_at_fork"):  # a forked child (a DataLoader worker) starts its own reads
            os.register_at_fork(after_in_child=self._after_fork)

    def _after_fork(self) -> None:
        self._lock = threading.Lock()
        self._groups: dict[tuple, list[Winner]] = {}
        self._reads: dict[tuple, Future] = {}
        self._late: set[tuple] = set()  # reads a call stopped waiting for: dispatch is told when they end
        self._down: dict[str, tuple[float, str]] = {}  # url -> (when to try again, why it failed)
        self._warned: set[tuple] = set()
        self._notes: list[tuple[tuple, str]] = []  # warnings found on the reading thread, given on the caller's
        self._shipped: dict[str, list[Winner]] = {}
        self._misses: list[tuple[str, Miss]] = []

    def __call__(self, op: Op, call: Call, plugin: str | None = None) -> Choice | None:
        """The tuned choice for ``call``; with ``plugin``, that plugin's tuned config (a forced plugin's)."""
        url = default_url()
        try:
            if url.startswith("snapshot:"):  # a frozen view of the winners: only that file is read
                from kernelzoo.db.snapshot import lookup

                return lookup(url, op, call, plugin)
            rows = self._rows(url, op, call)
            return None if rows is None else self._choose(url, rows, op, call, plugin)
        except Exception as exc:  # nothing the database holds may break an op call
            self._warn(("failed", url), f"kernelzoo: tuned winners are not used, calls run the default order: "
                       f"{_why(exc)}")
            return None
        finally:
            self._give_notes()

    def clear(self) -> None:
        """Forget what was read (dispatch.clear_cache calls this); the next lookups read again."""
        with self._lock:
            self._groups.clear()
            self._reads.clear()
            self._late.clear()
            self._down.clear()
            self._warned.clear()
            self._shipped.clear()

    def reset(self) -> None:
        """Forget everything, as a new process would: first records the missed keys, then forgets them."""
        self.flush_misses()
        self.clear()
        self._missed.clear()

    # --- reading -------------------------------------------------------------------------------

    def _rows(self, url: str, op: Op, call: Call) -> list[Winner] | None:
        """The winners of the call's group, or None while they cannot be had (the default order runs)."""
        here = fingerprint(call.device)
        group = (url, op.name, here, dtype_name(call.dtype), op.flags(call))
        with self._lock:
            rows = self._groups.get(group)
            if rows is not None:
                return rows
            down = self._down.get(url)
            if down is not None:
                if time.monotonic() < down[0]:
                    self._warn_locked(("down", url), f"kernelzoo: tuned winners are not used, calls run the "
                                      f"default order: {down[1]}")
                    return None
                del self._down[url]
            if group in self._late:
                return None  # a read is under way; the caller was told once
            future = self._reads.get(group)
        if future is None:
            shipped = self._prepare(here)
            with self._lock:
                future = self._reads.get(group)
                if future is None:
                    future = self._reads[group] = self._start_read(group, shipped)
        wait([future], timeout=wait_s())
        with self._lock:
            if group in self._groups:
                return self._groups[group]
            if future.done():  # before _finished has run on the reading thread
                exc = future.exception()
                if exc is None:
                    return future.result()
                self._warn_locked(("down", url), f"kernelzoo: tuned winners are not used, calls run the default "
                                  f"order: {_why(exc)}")
                return None
            self._late.add(group)
            self._warn_locked(("slow", url), f"kernelzoo: the tuning database {_shown(url)} did not answer within "
                              f"{wait_s():g} s; calls run the default order until it does")
            return None

    def _prepare(self, here: Fingerprint) -> list[Winner]:
        """What costs time without touching the database, done before the wait: SQLAlchemy's import on the first
        call of a process, and the shipped files' parse. The shipped rows of ``here``."""
        import kernelzoo.db.records
        import kernelzoo.db.store  # noqa: F401

        return self._shipped_rows(here)

    def _start_read(self, group: tuple, shipped: list[Winner]) -> Future:
        future: Future = Future()

        def work() -> None:
            try:
                future.set_result(self._read(group, shipped))
            except BaseException as exc:  # handed to the calling thread
                future.set_exception(exc)
            self._finished(group, future)

        threading.Thread(target=work, name="kernelzoo-db-read", daemon=True).start()
        return future

    def _read(self, group: tuple, shipped: list[Winner]) -> list[Winner]:
        """The group's rows: the database's (read-only, bounded in time), then the shipped files' where the database
        has no row of a plugin and bucket. Runs on a reading thread."""
        from kernelzoo.db import lifecycle, schema
        from kernelzoo.db.records import winners
        from kernelzoo.db.store import NoDatabase, open_reader

        url, op, here, dtype, flags = group
        readable = False  # the database holds kernelzoo's tables
        try:
            store = open_reader(url)
            state = store.schema_state()
            rows: list[Winner] = []
            if state.kind != "empty":
                readable = True
                schema.require(state, store.display_url)
                skipped: list[str] = []
                rows = winners(store, op=op, device_hash=here.hash, dtype=dtype, flags=flags, skipped=skipped)
                if skipped:
                    self._note(("rows", url), f"kernelzoo: skipped {len(skipped)} row(s) of the tuning database "
                               f"{store.display_url} that do not parse, e.g. {skipped[0]}; `kernelzoo doctor` "
                               "lists them")
        except NoDatabase:
            rows = []
        held = {(w.plugin, w.bucket) for w in rows}
        own = rows + [w for w in shipped if w.op == op and w.dtype == dtype and w.flags == flags
                      and (w.plugin, w.bucket) not in held]
        if not here.capability:
            return own
        # keys this GPU has no current record of borrow the nearest sibling GPU's (provisional records)
        others = [w for w in winners(store, op=op, dtype=dtype, flags=flags, skipped=[])
                  if w.device.hash != here.hash] if readable else []
        others += [w for w in lifecycle.shipped_records(op) if w.dtype == dtype and w.flags == flags]
        return own + lifecycle.borrow(here, own, others)

    def _finished(self, group: tuple, future: Future) -> None:
        """On the reading thread: keep the rows, or mark the database down; tell dispatch if a call gave up
        waiting, so its next call chooses again."""
        url = group[0]
        exc = future.exception()
        with self._lock:
            if self._reads.get(group) is not future:
                return  # cleared meanwhile
            del self._reads[group]
            late = group in self._late
            self._late.discard(group)
            if exc is None:
                self._groups[group] = future.result()
                self._warned.discard(("down", url))
            else:
                self._down[url] = (time.monotonic() + RETRY_S, _why(exc))
        if exc is not None:
            timer = threading.Timer(RETRY_S, dispatch.forget_choices)  # then calls ask again, and read again
            timer.daemon = True
            timer.start()
        if late:
            dispatch.forget_choices()

    def _shipped_rows(self, here: Fingerprint) -> list[Winner]:
        """The shipped records measured on this hardware, as rows of ``here`` (stale ones too: never run, but named
        by explain)."""
        found = self._shipped.get(here.hash)
        if found is not None:
            return found
        from kernelzoo.db.models import Origin
        from kernelzoo.db.shipped import shipped_files
        from kernelzoo.db.transfer import read_file

        found = []
        for path in shipped_files():
            try:
                records = read_file(path)
            except (KernelzooError, OSError) as exc:
                self._note(("shipped", str(path)), f"kernelzoo: shipped winners of {path.name} are not used: {exc}")
                continue
            found += [replace(w, device=here, origin=Origin.SHIPPED) for w in records
                      if w.device.hardware_hash == here.hardware_hash]
        self._shipped[here.hash] = found
        return found

    # --- choosing ------------------------------------------------------------------------------

    def _choose(self, url: str, rows: list[Winner], op: Op, call: Call, plugin: str | None) -> Choice | None:
        from kernelzoo.db import lifecycle

        bucket = op.bucket(call)
        by_bucket = self._usable(url, rows, op, call, plugin)
        if plugin is None and bucket not in by_bucket:
            self._miss(url, op, call, bucket)
        nearest = bucket not in by_bucket
        if not nearest:
            found, reason = by_bucket[bucket], f"tuned (exact bucket {op.describe_bucket(call, bucket)})"
        else:
            near = [b for b in by_bucket if len(b) == len(bucket)]
            if not near:
                return self._stale_default(op, call, lifecycle.stale_note(rows, bucket), plugin)
            best = min(near, key=lambda b: (math.dist(b, bucket), b))
            found = by_bucket[best]
            reason = (f"tuned (nearest bucket {op.describe_bucket(call, best)} "
                      f"for {op.describe_bucket(call, bucket)})")
        winner = pick_winner(found, call.device.type, op.name)
        reason = lifecycle.label(winner, fingerprint(call.device), reason)
        if stale := lifecycle.stale_note(rows, bucket):
            reason = f"{reason}; {stale}"
        impl = registry.impls[op.name][winner.plugin]
        return Choice(winner.plugin, impl.config(winner.config), reason, impl, nearest=nearest)

    def _usable(self, url: str, rows: list[Winner], op: Op, call: Call,
                plugin: str | None = None) -> Mapping[tuple[int, ...], list[Winner]]:
        """Rows whose plugin is chosen automatically here (or is ``plugin``), unchanged since tuning, whose config
        lies in the plugin's space, and able to run ``call``."""
        impls = registry.impls.get(op.name, {})
        allowed = {plugin} if plugin is not None else set(plugin_order(call.device.type, impls))
        by_bucket: dict[tuple[int, ...], list[Winner]] = {}
        for w in rows:
            impl = impls.get(w.plugin)
            if (w.plugin not in allowed or impl is None
                    or not registry.is_current(op.name, w.plugin, w.source_hash)
                    or not registry.availability(impl) or call.device.type not in impl.devices()):
                continue
            problem = config_problem(impl, w.config) or (None if impl.in_space(w.config) else
                                                         f"{w.config} is not a point of its config space")
            if problem is not None:
                self._warn(("config", url), f"kernelzoo: skipped a stored winner of {w.op}/{w.plugin} "
                           f"{w.dtype} bucket {w.bucket} whose config cannot run: {problem}; `kernelzoo doctor` "
                           "lists such rows")
                continue
            if impl.supports(call) is None:
                by_bucket.setdefault(w.bucket, []).append(w)
        return by_bucket

    @staticmethod
    def _stale_default(op: Op, call: Call, note: str, plugin: str | None) -> Choice | None:
        """No current record: the default order's first plugin that runs ``call``, its reason naming the stale
        records of the key (None, the plain default order, when there are none)."""
        if not note or plugin is not None:
            return None
        for impl in (registry.impls[op.name][p] for p in plugin_order(call.device.type, registry.impls[op.name],
                                                                      op.name)):
            if call.device.type in impl.devices() and registry.availability(impl) and impl.supports(call) is None:
                return Choice(impl.plugin, impl.config(), f"default order ({note})", impl)
        return None

    # --- missed keys ---------------------------------------------------------------------------

    def _miss(self, url: str, op: Op, call: Call, bucket: tuple[int, ...]) -> None:
        from kernelzoo.db.records import Miss

        here = fingerprint(call.device)
        dtype, flags = dtype_name(call.dtype), op.flags(call)
        key = (url, op.name, here.hash, dtype, flags, bucket)
        if key in self._missed:
            return
        self._missed.add(key)
        self._misses.append((url, Miss(op=op.name, device=here, dtype=dtype, bucket=bucket, flags=flags,
                                       shape=op.shape_string(call), params=_params(call))))

    def flush_misses(self, timeout: float = 5.0) -> int:
        """Write the missed keys kept so far, on a thread of its own, waiting for it at most ``timeout`` seconds;
        how many were written. A database that cannot take them (locked, read-only, not kernelzoo's) loses them:
        that costs ``tune --pending`` a key, never a call."""
        with self._lock:
            pending, self._misses = self._misses, []
        if not pending:
            return 0
        written = [0]

        def write() -> None:
            from kernelzoo.db.records import record_misses
            from kernelzoo.db.store import open_store

            by_url: dict[str, list[Miss]] = {}
            for url, miss in pending:
                by_url.setdefault(url, []).append(miss)
            for url, misses in by_url.items():
                try:
                    record_misses(open_store(url), misses)
                    written[0] += len(misses)
                except (DatabaseError, OSError):
                    pass

        thread = threading.Thread(target=write, name="kernelzoo-misses", daemon=True)
        thread.start()
        thread.join(timeout)
        return written[0]

    # --- warnings ------------------------------------------------------------------------------

    def _note(self, key: tuple, message: str) -> None:
        with self._lock:
            self._notes.append((key, message))

    def _give_notes(self) -> None:
        if self._notes:
            with self._lock:
                notes, self._notes = self._notes, []
            for key, message in notes:
                self._warn(key, message)

    def _warn(self, key: tuple, message: str) -> None:
        with self._lock:
            self._warn_locked(key, message)

    def _warn_locked(self, key: tuple, message: str) -> None:
        if key not in self._warned:
            self._warned.add(key)
            warnings.warn(message, RuntimeWarning, stacklevel=_STACKLEVEL)


winners = WinnerLookup()
