"""The ``kernelzoo`` command. Each module of ``kernelzoo.commands`` adds its subcommands
through ``register(subparsers)``; a new command is a new module there."""

from __future__ import annotations

import argparse
import importlib
import pkgutil
import sys
from collections.abc import Sequence

import kernelzoo.commands
from kernelzoo.errors import KernelzooError


def parser() -> argparse.ArgumentParser:
    top = argparse.ArgumentParser(
        prog="kernelzoo", description="Deep-learning kernels in every plugin kind, tuned per device and shape.")
    sub = top.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for info in sorted(pkgutil.iter_modules(kernelzoo.commands.__path__), key=lambda i: i.name):
        importlib.import_module(f"kernelzoo.commands.{info.name}").register(sub)
    return top


def main(argv: Sequence[str] | None = None) -> int:
    args = parser().parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except KernelzooError as exc:
        print(f"kernelzoo: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
