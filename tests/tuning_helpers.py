"""Fixtures and helpers of the tuning tests: a temporary database per test, toy plugins, CLI runs, the
project's scripts loaded as modules."""

from __future__ import annotations

import contextlib
import importlib.util
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest
import tuning_toys

from kernelzoo import dispatch
from kernelzoo.db import lookup
from kernelzoo.db.store import forget_stores
from kernelzoo.registry import registry

TESTS = Path(__file__).parent


def reset_lookup() -> None:
    """A fresh winner source and dispatch cache, as in a new process."""
    lookup.winners.reset()
    dispatch.clear_cache()


@contextlib.contextmanager
def temporary_db(directory: Path, mp: pytest.MonkeyPatch) -> Iterator[str]:
    """A new SQLite database in ``directory`` made the default (KERNELZOO_DB); its URL."""
    url = f"sqlite:///{directory / 'tuning.sqlite'}"
    mp.setenv("KERNELZOO_DB", url)
    mp.setenv("KERNELZOO_CACHE_DIR", str(directory / "cache"))  # compiled kernels too, never the user's
    # a first read of the database may take longer than an op call waits on a loaded test host; the tests of that
    # wait set their own
    mp.setenv("KERNELZOO_DB_WAIT_MS", "10000")
    reset_lookup()
    try:
        yield url
    finally:
        reset_lookup()
        forget_stores()


@contextlib.contextmanager
def planted_toys(mp: pytest.MonkeyPatch) -> Iterator[None]:
    """The toy op kz_toy registered here and in the tuner's workers."""
    mp.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(TESTS), os.environ.get("PYTHONPATH")])))
    mp.setenv("KERNELZOO_EXTRA_PLUGINS", "tuning_toys")
    registry.load().register_module(tuning_toys)
    try:
        yield
    finally:
        registry.ops.pop("kz_toy", None)
        registry.impls.pop("kz_toy", None)


def kernelzoo_cli(*args: str, env: dict | None = None, timeout: float = 300) -> subprocess.CompletedProcess:
    """Run ``kernelzoo ARGS`` in a new process."""
    return subprocess.run([sys.executable, "-m", "kernelzoo.cli", *args], capture_output=True, text=True,
                          timeout=timeout, env={**os.environ, **(env or {})})


def python(code: str, env: dict | None = None, timeout: float = 120) -> subprocess.CompletedProcess:
    """Run ``python -c CODE`` in a new process."""
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, **(env or {})})


ROOT = Path(__file__).resolve().parent.parent


def load_file(path: Path) -> ModuleType:
    """A script or example of the project (a path under ROOT) as a module."""
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
