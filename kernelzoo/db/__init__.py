"""The tuning database: winners per device, dtype and shape bucket, in SQLite or any SQLAlchemy URL.

Importing this package is cheap; SQLAlchemy loads when a database is first opened.
"""

from __future__ import annotations

import os

from kernelzoo.paths import cache_dir


def default_url() -> str:
    """``$KERNELZOO_DB``, else ``sqlite:///<cache dir>/tuning.sqlite`` (the cache dir honours
    ``$KERNELZOO_CACHE_DIR``)."""
    return os.environ.get("KERNELZOO_DB") or f"sqlite:///{cache_dir() / 'tuning.sqlite'}"
