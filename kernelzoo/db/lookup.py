"""The winner source dispatch asks once per key: exact bucket, else the nearest tuned bucket.

Nothing here touches the database before the first op call. Dispatch caches what this
returns per key, so the database is read once per (op, device, dtype, flags) group and
process. A key without an exact winner is reported as missed, once per process, by a
background thread, so the call does not wait for the write. A database that cannot be
used makes every lookup return None (the default order) after one warning.
"""

from __future__ import annotations

import atexit
import json
import math
import os
import queue
import threading
import warnings
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from kernelzoo.db import default_url
from kernelzoo.db.ranking import pick_winner
from kernelzoo.dispatch import Choice, plugin_order
from kernelzoo.errors import DatabaseError
from kernelzoo.fingerprint import Fingerprint, fingerprint
from kernelzoo.registry import Call, Op, dtype_name, registry

if TYPE_CHECKING:
    from kernelzoo.db.records import Miss, Winner
    from kernelzoo.db.store import Store


def _params(call: Call) -> dict[str, Any]:
    """The call's keyword arguments if they are JSON (Op.example takes them back), else none."""
    try:
        return json.loads(json.dumps(call.params))
    except (TypeError, ValueError):
        return {}


class MissWriter:
    """A daemon thread that writes missed keys; ``flush()`` waits for it (it runs at exit too)."""

    def __init__(self) -> None:
        self._after_fork()
        atexit.register(self.flush)
        if hasattr(os, "register_at_fork"):  # a forked child (a DataLoader worker) starts its own thread
            os.register_at_fork(after_in_child=self._after_fork)

    def _after_fork(self) -> None:
        self._queue: queue.Queue[tuple[str, Miss] | None] = queue.Queue()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    def put(self, url: str, miss: Miss) -> None:
        with self._lock:
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._run, name="kernelzoo-misses", daemon=True)
                self._thread.start()
        self._queue.put((url, miss))

    def _run(self) -> None:
        from kernelzoo.db.records import record_misses
        from kernelzoo.db.store import open_store

        while (item := self._queue.get()) is not None:
            url, miss = item
            try:
                record_misses(open_store(url), [miss])
            except (DatabaseError, OSError):
                pass  # a count lost to a locked or unusable database only costs `tune --pending` a key
            finally:
                self._queue.task_done()
        self._queue.task_done()

    def flush(self, timeout: float = 5.0) -> None:
        """Wait (at most ``timeout`` seconds) until every queued miss is written."""
        with self._lock:
            thread = self._thread
            self._thread = None
        if thread is not None and thread.is_alive():
            self._queue.put(None)
            thread.join(timeout)


class WinnerLookup:
    """Callable ``(op, call) -> Choice | None`` over the database at :func:`kernelzoo.db.default_url`."""

    def __init__(self) -> None:
        self._groups: dict[tuple, list[Winner]] = {}
        self._broken: set[str] = set()
        self._shipped: set[tuple[str, str]] = set()
        self._missed: set[tuple] = set()
        self.misses = MissWriter()

    def __call__(self, op: Op, call: Call, plugin: str | None = None) -> Choice | None:
        """The tuned choice for ``call``; with ``plugin``, that plugin's tuned config (a forced plugin's)."""
        url = default_url()
        if url in self._broken:
            return None
        from kernelzoo.db.store import CorruptDatabase, open_store, replace_damaged  # SQLAlchemy: not at import

        try:
            try:
                if url.startswith("snapshot:"):  # a frozen view of the winners: only that file is read
                    from kernelzoo.db.snapshot import lookup

                    return lookup(url, op, call, plugin)
                return self._lookup(url, op, call, plugin)
            except CorruptDatabase as exc:  # found while reading: replace the file, then read the new one
                replace_damaged(open_store(url), exc)
                self.clear()
                return self._lookup(url, op, call, plugin)
        except (DatabaseError, OSError) as exc:
            self._broken.add(url)
            # stacklevel 5: the caller of kernelzoo.explain, or kernelzoo.ops' wrapper for an op call
            warnings.warn(f"kernelzoo: tuned winners are not used, calls run the default order: {exc}",
                          RuntimeWarning, stacklevel=5)
            return None

    def clear(self) -> None:
        """Forget what was read (dispatch.clear_cache calls this); the next lookups read again."""
        self._groups.clear()
        self._broken.clear()

    def reset(self) -> None:
        """Forget everything, as a new process would: also shipped imports and keys reported missed."""
        self.misses.flush()
        self.clear()
        self._shipped.clear()
        self._missed.clear()

    def _lookup(self, url: str, op: Op, call: Call, plugin: str | None = None) -> Choice | None:
        from kernelzoo.db import lifecycle
        from kernelzoo.db.records import Miss
        from kernelzoo.db.store import open_store

        store = open_store(url)
        here = fingerprint(call.device)
        self._import_shipped(url, store, here)
        dtype, flags, bucket = dtype_name(call.dtype), op.flags(call), op.bucket(call)
        group = (url, op.name, here.hash, dtype, flags)
        if group not in self._groups:
            self._groups[group] = lifecycle.candidates(store, op.name, here, dtype, flags)
        by_bucket = self._usable(self._groups[group], op, call, plugin)
        if plugin is None and bucket not in by_bucket and (url, *group[1:], bucket) not in self._missed:
            self._missed.add((url, *group[1:], bucket))
            self.misses.put(url, Miss(op=op.name, device=here, dtype=dtype, bucket=bucket, flags=flags,
                                      shape=op.shape_string(call), params=_params(call)))
        nearest = bucket not in by_bucket
        if not nearest:
            found, reason = by_bucket[bucket], f"tuned (exact bucket {op.describe_bucket(call, bucket)})"
        else:
            near = [b for b in by_bucket if len(b) == len(bucket)]
            if not near:
                return self._stale_default(op, call, lifecycle.stale_note(self._groups[group], bucket), plugin)
            best = min(near, key=lambda b: (math.dist(b, bucket), b))
            found = by_bucket[best]
            reason = (f"tuned (nearest bucket {op.describe_bucket(call, best)} "
                      f"for {op.describe_bucket(call, bucket)})")
        winner = pick_winner(found, call.device.type, op.name)
        reason = lifecycle.label(winner, here, reason)
        if stale := lifecycle.stale_note(self._groups[group], bucket):
            reason = f"{reason}; {stale}"
        impl = registry.impls[op.name][winner.plugin]
        return Choice(winner.plugin, impl.config(winner.config), reason, impl, nearest=nearest)

    def _usable(self, rows: list[Winner], op: Op, call: Call,
                plugin: str | None = None) -> Mapping[tuple[int, ...], list[Winner]]:
        """Rows whose plugin is chosen automatically here (or is ``plugin``), unchanged since tuning and able to
        run ``call``."""
        impls = registry.impls.get(op.name, {})
        allowed = {plugin} if plugin is not None else set(plugin_order(call.device.type, impls))
        by_bucket: dict[tuple[int, ...], list[Winner]] = {}
        for w in rows:
            impl = impls.get(w.plugin)
            if (w.plugin in allowed and impl is not None
                    and registry.is_current(op.name, w.plugin, w.source_hash, w.config)
                    and registry.availability(impl) and call.device.type in impl.devices()
                    and impl.supports(call) is None):
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

    def _import_shipped(self, url: str, store: Store, here: Fingerprint) -> None:
        if (url, here.hash) in self._shipped:
            return
        self._shipped.add((url, here.hash))
        from kernelzoo.db.shipped import import_shipped

        try:
            import_shipped(store, here)
        except (DatabaseError, OSError, ValueError) as exc:
            warnings.warn(f"kernelzoo: shipped tuning winners were not imported: {exc}", RuntimeWarning,
                          stacklevel=5)


winners = WinnerLookup()
