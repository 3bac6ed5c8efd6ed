"""Shipped winners: the ``tuning_db/*.json`` exports, imported once per database and device on first use.

A shipped record applies when it was measured on the same chip (:attr:`Fingerprint.hardware_hash`:
GPU name, compute capability, SM count) and its plugin is installed; it is then stored under this
machine's own fingerprint with origin ``shipped``. Dispatch runs it while it is current (its kernel
code is the one installed and its config is in the space); a stale one is kept for
``kernelzoo tune --stale`` to re-time. Another GPU of the same compute capability borrows the records of the
nearest one as provisional records, read from the files without storing them
(:mod:`kernelzoo.db.lifecycle`).
A winner tuned here always takes precedence. Driver and Triton versions may differ from the
machine that measured it: the config stays correct (dispatch runs the same verified kernel),
only its rank may shift, which ``kernelzoo tune`` on this machine settles.
"""

from __future__ import annotations

import hashlib
import importlib.resources
from pathlib import Path

from sqlalchemy import select
from sqlalchemy.orm import Session

from kernelzoo.db.models import Origin, ShippedImportModel
from kernelzoo.db.records import Winner, device_id
from kernelzoo.db.store import Store
from kernelzoo.db.transfer import ImportResult, import_winners, read_file
from kernelzoo.fingerprint import Fingerprint
from kernelzoo.registry import registry

PACKAGE = "kernelzoo_tuning_db"  # tuning_db/ installed under this name (setup.py)


def shipped_dir() -> Path | None:
    """Where the shipped files are: the installed package, else ``tuning_db/`` beside ``kernelzoo/``."""
    try:
        return Path(str(importlib.resources.files(PACKAGE)))
    except ModuleNotFoundError:
        source_tree = Path(__file__).resolve().parents[2] / "tuning_db"
        return source_tree if source_tree.is_dir() else None


def shipped_files(directory: Path | None = None) -> list[Path]:
    """The shipped ``*.json`` exports, by name."""
    directory = directory or shipped_dir()
    return sorted(directory.glob("*.json")) if directory is not None else []


def _installed(w: Winner) -> bool:
    """Whether the record's plugin is installed. Its stale records are imported too: kept, never run as tuned,
    they are what ``kernelzoo tune --stale`` re-times after a kernel edit."""
    return w.plugin in registry.load().impls.get(w.op, {})


def import_shipped(store: Store, here: Fingerprint, files: list[Path] | None = None) -> list[tuple[Path, ImportResult]]:
    """Import each shipped file not yet imported for ``here``; what each import did."""
    done = []
    for path in shipped_files() if files is None else files:
        digest = hashlib.sha256(path.read_bytes()).hexdigest()

        def seen(session: Session, digest: str = digest) -> bool:
            dev = device_id(session, here, create=False)
            return dev is not None and session.execute(select(ShippedImportModel.shipped_import_id).where(
                ShippedImportModel.file_hash == digest, ShippedImportModel.device_id == dev)).first() is not None

        if store.transaction(seen):
            continue

        def mark(session: Session, n: int, path: Path = path, digest: str = digest) -> None:
            if not seen(session):  # another process may have imported it since the check above
                session.add(ShippedImportModel(file_name=path.name, file_hash=digest, records=n,
                                               device_id=device_id(session, here, create=True)))

        result = import_winners(store, read_file(path), here, origin=Origin.SHIPPED, rebind=True,
                                match=lambda fp: fp.hardware_hash == here.hardware_hash, current=_installed,
                                extra=mark)
        done.append((path, result))
    return done
