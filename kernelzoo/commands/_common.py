"""What the subcommands share: the common options (``--db``, ``--json``, ``-v``, the keys bench and tune
run), exit codes, name checks with a "did you mean", the device check, and JSON on stdout.

A subcommand adds a common option with one call (``add_db(p)``); a flag of its own is an ``add_argument`` in its
module's ``register``, read in its ``run``.
"""

from __future__ import annotations

import argparse
import difflib
import json
import sys
from collections.abc import Iterable, Sequence
from typing import Any

from kernelzoo.errors import ArgumentError, UnknownError, UnsupportedError

OK, FAILED, USAGE, UNTUNED = 0, 1, 2, 3
EXIT_CODES = (f"exit codes: {OK} ok, {FAILED} runtime error (a plugin, device or database that failed or is missing "
              f"here), {USAGE} usage error (a bad option, op or plugin name), {UNTUNED} some keys ended without a "
              "verified winner (tune)")


def add_db(p: argparse.ArgumentParser) -> None:
    from kernelzoo.db import as_url

    p.add_argument("--db", type=as_url, metavar="URL_OR_PATH", help="the tuning database: a SQLAlchemy URL or a "
                   "file path (default: $KERNELZOO_DB or the cache dir)")


def add_keys(p: argparse.ArgumentParser, op: str, plugins: str, dtypes: str) -> None:
    """--op, --plugin, --shape, --dtype and --device: the keys bench and tune run. ``op`` is the help of --op,
    ``plugins`` and ``dtypes`` say the defaults of --plugin and --dtype."""
    p.add_argument("--op", action="append", help=op)
    p.add_argument("--plugin", action="append", help=f"only this plugin (repeatable; default: {plugins})")
    p.add_argument("--shape", action="append", help="a shape like 4096x4096 (repeatable; default: the op's "
                   "representative shapes)")
    p.add_argument("--dtype", action="append", help="float32, float16, bfloat16, float8_e4m3fn or float8_e5m2 "
                   f"(repeatable; default: {dtypes})")
    p.add_argument("--device", help="cpu or cuda (default: cuda if there is a GPU)")


def add_json(p: argparse.ArgumentParser, what: str = "the result") -> None:
    p.add_argument("--json", action="store_true", help=f"print {what} as JSON on stdout (nothing else there)")


def add_verbose(p: argparse.ArgumentParser) -> None:
    p.add_argument("-v", "--verbose", action="store_true", help="details: every table, note and failure")


def did_you_mean(name: str, known: Iterable[str]) -> str:
    """' (did you mean 'x'?)' for the closest of ``known``, else ''."""
    close = difflib.get_close_matches(name, sorted(known), n=1, cutoff=0.6)
    return f"; did you mean {close[0]!r}?" if close else ""


def check_ops(names: Sequence[str] | None) -> list[str]:
    """``names``, each a registered op, else UnknownError with the closest name and the list."""
    from kernelzoo.registry import registry

    known = registry.load().ops
    for name in names or ():
        if name not in known:
            raise UnknownError(f"unknown op {name!r}{did_you_mean(name, known)} (known ops: "
                               f"{', '.join(sorted(known))})")
    return list(names or ())


def check_plugins(plugins: Sequence[str] | None, ops: Sequence[str] | None = None) -> list[str]:
    """``plugins``, each a plugin of one of ``ops`` (of any op when none is named), else UnknownError."""
    from kernelzoo.registry import registry

    registry.load()
    known = {p for op in (ops or registry.ops) for p in registry.impls.get(op, {})}
    for plugin in plugins or ():
        if plugin not in known:
            owner = f"{', '.join(ops)} has" if ops else "no op has"
            raise UnknownError(f"{owner} no plugin {plugin!r}{did_you_mean(plugin, known)} (plugins: "
                               f"{', '.join(sorted(known))})")
    return list(plugins or ())


def check_device(name: str | None, command: str) -> str:
    """``name`` (default: cuda when torch sees a GPU, else cpu), checked: UnsupportedError when it is cuda and
    torch here has no CUDA, ArgumentError when it is neither."""
    import torch

    device = name or ("cuda" if torch.cuda.is_available() else "cpu")
    kind = device.split(":")[0]
    if kind not in ("cpu", "cuda"):
        raise ArgumentError(f"{command}: --device must be cpu or cuda, got {device!r}")
    if kind == "cuda" and not torch.cuda.is_available():
        build = "is a CPU-only build" if torch.version.cuda is None else "sees no CUDA GPU"
        raise UnsupportedError(f"{command}: --device {device}, but torch {torch.__version__} here {build}; "
                               "run it on a machine with a GPU, or pass --device cpu")
    return device


def print_json(data: Any) -> None:
    """``data`` as indented JSON on stdout."""
    sys.stdout.write(json.dumps(data, indent=2, default=str) + "\n")
    sys.stdout.flush()
