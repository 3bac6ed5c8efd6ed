"""The ``kernelzoo`` command. Each module of ``kernelzoo.commands`` adds its subcommands
through ``register(subparsers)``; a new command is a new module there (modules whose name starts
with ``_`` are shared helpers, not commands)."""

from __future__ import annotations

import argparse
import importlib
import os
import pkgutil
import signal
import sys
import threading
from collections.abc import Sequence
from types import FrameType

import kernelzoo.commands
from kernelzoo.commands._common import EXIT_CODES, FAILED, USAGE
from kernelzoo.db.store import forget_stores
from kernelzoo.errors import ArgumentError, DTypeError, KernelzooError, UnknownError

# errors in what the user typed (exit 2); every other kernelzoo error is about this machine or a run (exit 1)
USAGE_ERRORS = (ArgumentError, DTypeError, UnknownError)


def parser() -> argparse.ArgumentParser:
    from kernelzoo import __version__

    top = argparse.ArgumentParser(
        prog="kernelzoo", description="Deep-learning kernels in every plugin kind, tuned per device and shape.",
        epilog=EXIT_CODES + ". Every reporting command takes --json (JSON on stdout).")
    top.add_argument("--version", action="version", version=f"kernelzoo {__version__}")
    sub = top.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for info in sorted(pkgutil.iter_modules(kernelzoo.commands.__path__), key=lambda i: i.name):
        if not info.name.startswith("_"):
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
        if isinstance(exc, BrokenPipeError):  # `kernelzoo list --json | head`: the reader has had enough
            _quiet_stdout()
            return 128 + getattr(signal, "SIGPIPE", 13)
        if isinstance(exc, KernelzooError):
            print(f"kernelzoo: {exc}", file=sys.stderr)
            return USAGE if isinstance(exc, USAGE_ERRORS) else FAILED
        raise
    finally:
        if main_thread:
            signal.signal(signal.SIGTERM, previous if previous is not None else signal.SIG_DFL)
        forget_stores()


def _quiet_stdout() -> None:
    """Point stdout at /dev/null, so that flushing it at exit does not raise into a second traceback."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError):  # stdout is not a file descriptor (a test's capture)
        pass


if __name__ == "__main__":
    sys.exit(main())
