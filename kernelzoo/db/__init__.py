"""The tuning database: winners per device, dtype and shape bucket, in SQLite or any SQLAlchemy URL.

Importing this package is cheap; SQLAlchemy loads when a database is first opened.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from kernelzoo.paths import cache_dir

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
    honours ``$KERNELZOO_CACHE_DIR``)."""
    found = os.environ.get("KERNELZOO_DB")
    return as_url(found) if found else f"sqlite:///{cache_dir() / 'tuning.sqlite'}"
