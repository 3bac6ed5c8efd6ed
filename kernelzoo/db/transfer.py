"""Winners as JSON records: ``kernelzoo db export`` / ``db import`` and the shipped ``tuning_db/`` files.

The format is described in ``tuning_db/README.md``: one object with ``format``,
``version`` and a list of ``records``, each a per-plugin winner with its device fingerprint.
Version 2 records carry the hash of the kernel's code (``source_hash``) and of each of its files
(``code_files``); a version 1 record's hash also covered the config space, and is re-keyed to the
installed code's hash when it was measured on that code (:mod:`kernelzoo.db.legacy`).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from sqlalchemy.orm import Session

from kernelzoo.db.models import Origin
from kernelzoo.db.records import Winner, put_winner, winners
from kernelzoo.db.store import Store
from kernelzoo.errors import ArgumentError
from kernelzoo.fingerprint import Fingerprint

FORMAT = "kernelzoo-winners"
FORMAT_VERSION = 2
_FIELDS = ("op", "plugin", "source_hash", "device", "dtype", "bucket", "flags", "config", "time_ms", "spread")


def to_record(w: Winner) -> dict[str, Any]:
    """One winner as a JSON-ready record."""
    return {"op": w.op, "plugin": w.plugin, "source_hash": w.source_hash, "device": w.device.to_dict(),
            "device_hash": w.device.hash, "dtype": w.dtype, "bucket": list(w.bucket), "flags": w.flags,
            "config": dict(w.config), "time_ms": w.time_ms, "spread": w.spread, "shape": w.shape,
            "trials": w.trials, "origin": w.origin.value, "code_files": dict(w.code_files),
            **({"params": dict(w.params)} if w.params is not None else {})}


def from_record(record: Mapping[str, Any], where: str, version: int = FORMAT_VERSION) -> Winner:
    """The winner of a record of format ``version``; ArgumentError naming ``where`` and the field if it is
    malformed."""
    missing = [f for f in _FIELDS if f not in record]
    if missing:
        raise ArgumentError(f"{where}: record lacks {', '.join(missing)}; expected the fields {', '.join(_FIELDS)}")
    try:
        w = Winner(op=str(record["op"]), plugin=str(record["plugin"]), source_hash=str(record["source_hash"]),
                      device=Fingerprint.from_dict(record["device"]), dtype=str(record["dtype"]),
                      bucket=tuple(int(b) for b in record["bucket"]), flags=str(record["flags"]),
                      config=dict(record["config"]), time_ms=float(record["time_ms"]),
                      spread=float(record["spread"]), shape=str(record.get("shape", "")),
                      trials=int(record.get("trials", 0)),
                      code_files={str(k): str(v) for k, v in (record.get("code_files") or {}).items()},
                      params=dict(record["params"]) if record.get("params") is not None else None)
    except (TypeError, ValueError, AttributeError) as exc:
        raise ArgumentError(f"{where}: malformed record ({exc})") from None
    if version < 2:  # the old hash of code and config space: re-keyed where it is the installed code's
        from kernelzoo.db.legacy import rekey

        found = rekey(w.op, w.plugin, w.source_hash)
        if found is not None:
            w = replace(w, source_hash=found[0], code_files=found[1])
    return w


def export_data(store: Store, op: str | None = None) -> dict[str, Any]:
    """Every stored winner (of ``op``) as one JSON-ready object."""
    from kernelzoo import __version__

    return {"format": FORMAT, "version": FORMAT_VERSION, "kernelzoo": __version__,
            "exported_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
            "records": [to_record(w) for w in winners(store, op=op)]}


def read_file(path: Path) -> list[Winner]:
    """The winners of an export file; ArgumentError if it is not one."""
    try:
        data = json.loads(Path(path).read_text())
    except (OSError, ValueError) as exc:
        raise ArgumentError(f"{path}: cannot read a winners file: {exc}") from None
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        got = data.get("format") if isinstance(data, dict) else type(data).__name__
        raise ArgumentError(f"{path}: expected a {FORMAT!r} export (format field), got {got!r}")
    if not isinstance(data.get("version"), int) or data["version"] > FORMAT_VERSION:
        raise ArgumentError(f"{path}: format version {data.get('version')!r}; this kernelzoo reads "
                            f"version {FORMAT_VERSION} and older")
    return [from_record(r, f"{path} record {i}", data["version"]) for i, r in enumerate(data.get("records", []))]


@dataclass(frozen=True)
class ImportResult:
    imported: int = 0
    other_device: int = 0  # skipped: recorded on a device that does not match
    kept: int = 0  # skipped: a winner measured here already holds the key
    stale: int = 0  # skipped: not current (the kernel's code changed, or the plugin is not installed)


def import_winners(store: Store, found: list[Winner], here: Fingerprint, *, any_device: bool = False,
                   origin: Origin = Origin.IMPORTED, match: Callable[[Fingerprint], bool] | None = None,
                   current: Callable[[Winner], bool] | None = None,
                   rebind: bool = False, extra: Callable[[Session, int], None] | None = None) -> ImportResult:
    """Store the winners of ``found`` whose device matches ``here`` (all with ``any_device``).

    ``match`` decides a device match (default: the same full fingerprint); ``current`` rejects
    stale records; ``rebind`` stores matches under ``here`` instead of their own fingerprint.
    A winner measured here (origin tuned) is never overwritten. ``extra(session, n)`` runs in
    the same transaction (the shipped-file mark).
    """
    match = match or (lambda fp: fp.hash == here.hash)

    def write(session: Session) -> ImportResult:
        imported = other = kept = stale = 0
        for w in found:
            if not any_device and not match(w.device):
                other += 1
                continue
            if current is not None and not current(w):
                stale += 1
                continue
            device = here if rebind else w.device
            w = replace(w, device=device, origin=origin)
            if put_winner(session, w, replace=(Origin.IMPORTED, Origin.SHIPPED)):
                imported += 1
            else:
                kept += 1
        if extra is not None:
            extra(session, imported)
        return ImportResult(imported, other, kept, stale)

    return store.transaction(write, write=True)
