"""The tuning database: winners per device, dtype and shape bucket, in SQLite or any SQLAlchemy URL.

Importing this package is cheap; SQLAlchemy loads when a database is first opened.

Op calls only read it (:mod:`kernelzoo.db.lookup`). What they would otherwise write happens at
points a program or a command chooses: :func:`import_shipped` (``kernelzoo db import --shipped``)
stores the shipped winners (until then a lookup reads the shipped files directly), and
:func:`flush_misses` records the keys that calls found no tuned winner for (it also runs at exit).
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

import platformdirs

_SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://")


def as_url(text: str) -> str:
    """A SQLAlchemy URL from ``text``: a URL (``scheme://...``) or a winners snapshot (``snapshot:FILE``) as it
    is, else a file path, made absolute (``~`` expanded), as a SQLite URL."""
    text = text.strip()
    if _SCHEME.match(text) or text.startswith("snapshot:"):
        return text
    return f"sqlite:///{Path(text).expanduser().resolve()}"


def default_url() -> str:
    """``$KERNELZOO_DB`` (a URL or a file path), else ``sqlite:///<cache dir>/tuning.sqlite`` (the cache dir
    honours ``$KERNELZOO_CACHE_DIR``). Nothing is created here: the directory is made when the database is."""
    found = os.environ.get("KERNELZOO_DB")
    if found:
        return as_url(found)
    root = os.environ.get("KERNELZOO_CACHE_DIR") or platformdirs.user_cache_dir("kernelzoo")
    return f"sqlite:///{Path(root).absolute() / 'tuning.sqlite'}"


def import_shipped(url: str | None = None, devices: list[Any] | None = None) -> list[Any]:
    """Store the shipped winners (``tuning_db/*.json``) of ``devices`` (fingerprints; default: this machine's CPU
    and GPUs) in the database at ``url`` (default: :func:`default_url`); each file is imported once per database
    and device. What each import did: (file, ImportResult) pairs."""
    import torch

    from kernelzoo.db.shipped import import_shipped as import_files
    from kernelzoo.db.store import open_store
    from kernelzoo.fingerprint import cpu_fingerprint, gpu_fingerprint

    store = open_store(url)
    if devices is None:
        devices = [cpu_fingerprint()]
        if torch.cuda.is_available():
            devices += [gpu_fingerprint(i) for i in range(torch.cuda.device_count())]
    return [done for fp in devices for done in import_files(store, fp)]


def flush_misses(timeout: float = 5.0) -> int:
    """Record, in their databases, the keys op calls of this process found no exact tuned winner for (``kernelzoo
    tune --pending`` tunes them); wait at most ``timeout`` seconds. How many keys were written."""
    from kernelzoo.db.lookup import winners

    return winners.flush_misses(timeout)
