"""Snapshots: a frozen, read-only view of the winners, and its content hash.

``kernelzoo db snapshot FILE`` writes every current per-plugin winner of the database (what dispatch
compares for each key) to a JSON file with a hash of that content. With ``KERNELZOO_DB=snapshot:FILE``
(or :func:`kernelzoo.distributed.use_snapshot`) dispatch reads only that file: no database is opened,
nothing is written, no missed key is recorded, so every process that loads one snapshot runs the same
kernels. The hash covers exactly what dispatch reads, in a fixed order, so two databases with the same
winners give the same hash whatever order their rows were written in.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from kernelzoo.db.ranking import by_key, pick_winner
from kernelzoo.dispatch import Choice, plugin_order
from kernelzoo.errors import ArgumentError, DatabaseError
from kernelzoo.fingerprint import fingerprint
from kernelzoo.registry import Call, Op, dtype_name, registry

PREFIX = "snapshot:"  # KERNELZOO_DB=snapshot:FILE
FORMAT = "kernelzoo-snapshot"
FORMAT_VERSION = 1
# the fields of a record that dispatch reads; the hash covers these and nothing else
_HASHED = ("op", "plugin", "source_hash", "device_hash", "dtype", "bucket", "flags", "config", "time_ms", "spread")


def content_hash(records: Sequence[Mapping[str, Any]]) -> str:
    """sha256 of the records' dispatch fields, sorted, as canonical JSON."""
    rows = sorted(json.dumps({k: r[k] for k in _HASHED}, sort_keys=True, separators=(",", ":"), default=repr)
                  for r in records)
    return hashlib.sha256("\n".join(rows).encode()).hexdigest()


def snapshot_data(store: Any, op: str | None = None) -> dict[str, Any]:
    """The current winners of ``store`` (of ``op``) as a snapshot object, with its hash."""
    from kernelzoo import __version__
    from kernelzoo.db.records import winners
    from kernelzoo.db.transfer import to_record

    registry.load()
    rows = [to_record(w) for _, current, _ in by_key(winners(store, op=op)) for w in current]
    rows.sort(key=lambda r: (r["op"], r["device_hash"], r["dtype"], r["flags"], r["bucket"], r["plugin"]))
    return {"format": FORMAT, "version": FORMAT_VERSION, "kernelzoo": __version__, "hash": content_hash(rows),
            "written_at": datetime.now(timezone.utc).isoformat(timespec="seconds"), "records": rows}


def write_snapshot(store: Any, path: str | Path, op: str | None = None) -> str:
    """Write the snapshot of ``store`` to ``path`` (atomically: readers see the old file or the new); its hash."""
    data = snapshot_data(store, op)
    path = Path(path)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")
    os.replace(tmp, path)
    return data["hash"]


@dataclass(frozen=True)
class Snapshot:
    """A loaded snapshot: its winners, the hash of their content, and the hash the file states."""

    path: Path
    winners: tuple[Any, ...]  # kernelzoo.db.records.Winner
    hash: str  # of the content read
    stated_hash: str  # written in the file; differs from ``hash`` when the file was edited after writing

    @property
    def intact(self) -> bool:
        return self.hash == self.stated_hash


def load_snapshot(path: str | Path) -> Snapshot:
    """Read a snapshot file; ArgumentError if it is not one (what was expected and what came)."""
    from kernelzoo.db.transfer import from_record

    path = Path(path)
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise ArgumentError(f"{path}: cannot read a winners snapshot: {exc}") from None
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        got = data.get("format") if isinstance(data, dict) else type(data).__name__
        raise ArgumentError(f"{path}: expected a {FORMAT!r} file (written by `kernelzoo db snapshot`), got format "
                            f"{got!r}")
    if not isinstance(data.get("version"), int) or data["version"] > FORMAT_VERSION:
        raise ArgumentError(f"{path}: snapshot format version {data.get('version')!r}; this kernelzoo reads "
                            f"version {FORMAT_VERSION} and older")
    rows = data.get("records")
    if not isinstance(rows, list) or any(not isinstance(r, dict) or not set(_HASHED) <= set(r) for r in rows):
        raise ArgumentError(f"{path}: expected 'records', a list of objects with the fields {', '.join(_HASHED)}")
    found = tuple(from_record(r, f"{path} record {i}") for i, r in enumerate(rows))
    return Snapshot(path, found, content_hash(rows), str(data.get("hash", "")))


def snapshot_path(url: str) -> Path | None:
    """The file of a ``snapshot:FILE`` database setting, else None."""
    return Path(url[len(PREFIX):]).expanduser() if url.startswith(PREFIX) else None


_loaded: dict[tuple[str, int, int], tuple[Snapshot, dict[tuple, list[Any]]]] = {}
_lock = threading.Lock()


def _grouped(path: Path) -> tuple[Snapshot, dict[tuple, list[Any]]]:
    """The snapshot at ``path`` and its winners by (op, device hash, dtype, flags); read again if the file
    changed."""
    st = path.stat()
    tag = (str(path), st.st_mtime_ns, st.st_size)
    with _lock:
        if tag not in _loaded:
            snap = load_snapshot(path)
            groups: dict[tuple, list[Any]] = {}
            for w in snap.winners:
                groups.setdefault((w.op, w.device.hash, w.dtype, w.flags), []).append(w)
            _loaded.clear()
            _loaded[tag] = (snap, groups)
        return _loaded[tag]


def lookup(url: str, op: Op, call: Call, plugin: str | None = None) -> Choice | None:
    """Dispatch's winner for ``call`` from the snapshot of ``url`` (``snapshot:FILE``): the exact bucket, else
    the nearest tuned one, as the database lookup does, and never a write."""
    path = snapshot_path(url)
    assert path is not None, "called for snapshot: settings only"
    try:
        _, groups = _grouped(path)
    except (OSError, ArgumentError) as exc:  # the lookup warns once and runs the default order
        raise DatabaseError(f"{path}: cannot read a winners snapshot: {exc}") from None
    here = fingerprint(call.device)
    rows = groups.get((op.name, here.hash, dtype_name(call.dtype), op.flags(call)), [])
    impls = registry.impls.get(op.name, {})
    allowed = {plugin} if plugin is not None else set(plugin_order(call.device.type, impls))
    by_bucket: dict[tuple[int, ...], list[Any]] = {}
    for w in rows:
        impl = impls.get(w.plugin)
        if (w.plugin in allowed and impl is not None and impl.source_hash == w.source_hash
                and registry.availability(impl) and call.device.type in impl.devices() and impl.supports(call) is None):
            by_bucket.setdefault(w.bucket, []).append(w)
    bucket = op.bucket(call)
    if bucket in by_bucket:
        found, nearest, reason = by_bucket[bucket], False, f"exact bucket {op.describe_bucket(call, bucket)}"
    else:
        near = [b for b in by_bucket if len(b) == len(bucket)]
        if not near:
            return None
        best = min(near, key=lambda b: (math.dist(b, bucket), b))
        found, nearest = by_bucket[best], True
        reason = f"nearest bucket {op.describe_bucket(call, best)} for {op.describe_bucket(call, bucket)}"
    winner = pick_winner(found, call.device.type, op.name)
    impl = impls[winner.plugin]
    return Choice(winner.plugin, impl.config(winner.config), f"tuned ({reason}; snapshot {path.name})", impl,
                  nearest=nearest)


def forget() -> None:
    """Drop the snapshots read in this process (the next lookup reads the file again)."""
    with _lock:
        _loaded.clear()
