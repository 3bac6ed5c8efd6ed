"""Fill a shipped winners file: tune the (key, plugin) pairs it lacks on this GPU and merge the winners into it.

    python scripts/fill_shipped.py tuning_db/h200.json --budget 8m --trials 1 --budget-ms 50
    python scripts/fill_shipped.py tuning_db/h200.json --stale     # after kernel edits: re-time its stale records

One command for the three steps: ``kernelzoo tune --missing FILE`` (the ops' representative keys, every dtype
``kernelzoo tune`` picks, the plugins that run them, only the pairs FILE lacks; key by key until ``--budget`` is
spent), ``kernelzoo db export`` of what it stored, and ``scripts/merge_records.py FILE`` of that export (the
winners measured here: never a copy of a shipped record). Its tuning database (``--db``, default
``fill-FILE.sqlite`` here) keeps the studies, so a rerun after the budget ran out tunes only what is still
missing. With ``--stale`` the first step is ``kernelzoo tune --stale`` instead: the file's stale records (their
kernel changed since) re-timed with their configs under the installed code, each replacing its stale record in
place. The last lines are the merge's counts.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("file", type=Path, help="the shipped file to fill, e.g. tuning_db/h200.json")
    parser.add_argument("--op", action="append", help="only this op (repeatable; default: every op)")
    parser.add_argument("--plugin", action="append", help="only this plugin (repeatable)")
    parser.add_argument("--device", help="cuda (default) or cpu")
    parser.add_argument("--budget", help="stop starting keys after this long (600, 90s, 8m)")
    parser.add_argument("--trials", default="1", help="trials per plugin and key: the default config first, "
                        "then the plugin's tuning seeds (default 1)")
    parser.add_argument("--budget-ms", default="200", help="measuring time per trial (default 200)")
    parser.add_argument("--stale", action="store_true", help="re-time the file's stale records instead")
    parser.add_argument("--db", help="the tuning database (default: sqlite:///fill-FILE.sqlite here)")
    args = parser.parse_args(argv)

    from kernelzoo import cli

    db = args.db or f"sqlite:///fill-{args.file.stem}.sqlite"
    what = ["--stale"] if args.stale else ["--missing", str(args.file)]
    tune = ["tune", *what, "--db", db, "--trials", args.trials, "--budget-ms", args.budget_ms]
    for flag, values in (("--op", args.op), ("--plugin", args.plugin)):
        for value in values or ():
            tune += [flag, value]
    tune += ["--device", args.device] if args.device else []
    tune += ["--budget", args.budget] if args.budget else []
    code = cli.main(tune)
    if code not in (0, 3):  # 3: some key left untuned (no plugin could run it): the others are still merged
        print(f"fill_shipped: kernelzoo tune exited {code}; nothing merged", file=sys.stderr)
        return code
    with tempfile.TemporaryDirectory() as tmp:
        export = Path(tmp) / "fresh.json"
        if cli.main(["db", "export", str(export), "--db", db]) != 0:
            return 1
        data = json.loads(export.read_text())
        data["records"] = [r for r in data["records"] if r.get("origin") in ("tuned", "verified")]
        export.write_text(json.dumps(data))
        sys.path.insert(0, str(HERE))
        try:
            import merge_records
        finally:
            sys.path.remove(str(HERE))
        return merge_records.main([str(args.file), str(export)])


if __name__ == "__main__":
    raise SystemExit(main())
