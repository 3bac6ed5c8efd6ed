"""``kernelzoo dashboard``: optuna-dashboard on the tuning database, where every study kernelzoo ran is kept.

Study names read 'kernelzoo: softmax · triton · float32 · 2^12,2^10 · NVIDIA H200 · ...', and each study carries
the key's winner (``key_winner``), the plugin's best time and config as user attributes.
"""

from __future__ import annotations

import argparse
import importlib.util
import shutil
import subprocess
import sys

from kernelzoo.commands._common import add_db
from kernelzoo.errors import UnsupportedError

INSTALL = 'pip install "kernelzoo[dashboard]" (or pip install optuna-dashboard)'


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("dashboard", help="browse the tuning studies in optuna-dashboard",
                       description="Start optuna-dashboard on the tuning database (it needs the optional extra: "
                       f"{INSTALL}). Each study is one plugin at one key; its user attributes hold the key's "
                       "winner and the plugin's best time and config.")
    add_db(p)
    p.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    p.add_argument("--port", type=int, default=8080, help="port (default 8080)")
    p.set_defaults(func=run)


def command(url: str, host: str, port: int) -> list[str]:
    """The optuna-dashboard command line for ``url``; UnsupportedError saying how to install it when it is not."""
    if importlib.util.find_spec("optuna_dashboard") is None:
        raise UnsupportedError(f"dashboard: optuna-dashboard is not installed here; {INSTALL}")
    exe = shutil.which("optuna-dashboard")
    base = [exe] if exe else [sys.executable, "-m", "optuna_dashboard"]
    return [*base, url, "--host", host, "--port", str(port)]


def run(args: argparse.Namespace) -> int:
    from kernelzoo.db import default_url
    from kernelzoo.db.store import display_url, open_store

    url = args.db or default_url()
    argv = command(url, args.host, args.port)
    open_store(url)  # the schema exists (and is this kernelzoo's) before the dashboard reads it
    print(f"kernelzoo: optuna-dashboard on {display_url(url)} at http://{args.host}:{args.port} (Ctrl-C stops it)",
          file=sys.stderr, flush=True)
    return subprocess.call(argv)
