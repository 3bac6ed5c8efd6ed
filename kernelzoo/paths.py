"""Where kernelzoo keeps compiled kernels and the tuning database."""

from __future__ import annotations

import os
from pathlib import Path

import platformdirs


def cache_dir(*parts: str) -> Path:
    """``$KERNELZOO_CACHE_DIR`` or the user cache dir, joined with ``parts`` and created."""
    root = os.environ.get("KERNELZOO_CACHE_DIR") or platformdirs.user_cache_dir("kernelzoo")
    path = Path(root, *parts)
    path.mkdir(parents=True, exist_ok=True)
    return path
