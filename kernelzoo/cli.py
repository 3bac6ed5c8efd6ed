"""The ``kernelzoo`` command. Each module of ``kernelzoo.commands`` adds its subcommands
through ``register(subparsers)``; a new command is a new module there."""

from __future__ import annotations

import argparse
import importlib
import pkgutil
import signal
import sys
import threading
from collections.abc import Sequence
from types import FrameType

import kernelzoo.commands
from kernelzoo.db.store import forget_stores
from kernelzoo.errors import KernelzooError


def parser() -> argparse.ArgumentParser:
    top = argparse.ArgumentParser(
        prog="kernelzoo", description="Deep-learning kernels in every plugin kind, tuned per device and shape.")
    sub = top.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for info in sorted(pkgutil.iter_modules(kernelzoo.commands.__path__), key=lambda i: i.name):
        importlib.import_module(f"kernelzoo.commands.{info.name}").register(sub)
    return top


class _Terminated(KeyboardInterrupt):
    """SIGTERM (``timeout``, a job scheduler), unwound as Ctrl-C is."""


def _terminate(signum: int, frame: FrameType | None) -> None:
    raise _Terminated


def _interruption(exc: BaseException | None) -> KeyboardInterrupt | None:
    """The Ctrl-C or SIGTERM that ``exc`` is, or was raised while unwinding from, else None. Code that an
    interrupt lands in may lose it: when it lands in Optuna's bookkeeping of a trial, the trial loop's finally
    block raises an UnboundLocalError in its place."""
    seen = set()
    while exc is not None and id(exc) not in seen:
        if isinstance(exc, KeyboardInterrupt):
            return exc
        seen.add(id(exc))
        exc = exc.__context__
    return None


def main(argv: Sequence[str] | None = None) -> int:
    args = parser().parse_args(argv)
    # SIGTERM ends a command as Ctrl-C does: a tuning run closes its workers, and the databases are closed
    # below, so SQLite folds its write-ahead log into the database file (killed outright, a run left its last
    # trials and winners in the -wal file beside it, which a copy of the file alone lacks)
    main_thread = threading.current_thread() is threading.main_thread()
    previous = signal.signal(signal.SIGTERM, _terminate) if main_thread else None
    try:
        return int(args.func(args) or 0)
    except BaseException as exc:
        if (interrupt := _interruption(exc)) is not None:
            return 128 + signal.SIGTERM if isinstance(interrupt, _Terminated) else 130
        if isinstance(exc, KernelzooError):
            print(f"kernelzoo: {exc}", file=sys.stderr)
            return 2
        raise
    finally:
        if main_thread:
            signal.signal(signal.SIGTERM, previous if previous is not None else signal.SIG_DFL)
        forget_stores()


if __name__ == "__main__":
    sys.exit(main())
