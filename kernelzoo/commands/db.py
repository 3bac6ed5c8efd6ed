"""``kernelzoo db export | import | prune | upgrade``: moving, cleaning and upgrading the tuning database."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from kernelzoo.errors import ArgumentError


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("db", help="export, import, prune or upgrade the tuning database")
    db = p.add_subparsers(dest="db_command", required=True, metavar="DB_COMMAND")

    e = db.add_parser("export", help="write the stored winners as JSON records")
    e.add_argument("file", help="the file to write ('-' for stdout)")
    e.add_argument("--op", help="only this op")
    e.set_defaults(func=run_export)

    i = db.add_parser("import", help="store the winners of an export (those of this machine's devices)")
    i.add_argument("file", nargs="?", help="an export written by `kernelzoo db export`")
    i.add_argument("--shipped", action="store_true", help="store the shipped winners (tuning_db/) of this "
                   "machine's devices instead (op calls read them from their files until then)")
    i.add_argument("--any-device", action="store_true", help="import records of every device, as they are")
    i.set_defaults(func=run_import)

    r = db.add_parser("prune", help="drop winners and studies of kernels or config spaces that changed")
    r.add_argument("--older-than", type=float, metavar="DAYS", help="also drop studies untouched for DAYS days")
    r.set_defaults(func=run_prune)

    u = db.add_parser("upgrade", help="upgrade an older schema to this kernelzoo's")
    u.set_defaults(func=run_upgrade)

    n = db.add_parser("snapshot", help="write a frozen, read-only view of the winners and its content hash "
                      "(KERNELZOO_DB=snapshot:FILE makes dispatch read only it)")
    n.add_argument("file", help="the file to write")
    n.add_argument("--op", help="only this op")
    n.set_defaults(func=run_snapshot)
    for parser in (e, i, r, u, n):
        parser.add_argument("--db", help="SQLAlchemy URL of the tuning database "
                            "(default: $KERNELZOO_DB or the cache dir)")


def run_export(args: argparse.Namespace) -> int:
    from kernelzoo.db.store import open_store
    from kernelzoo.db.transfer import export_data

    data = export_data(open_store(args.db), op=args.op)
    text = json.dumps(data, indent=1, sort_keys=True) + "\n"
    if args.file == "-":
        sys.stdout.write(text)
    else:
        Path(args.file).write_text(text)
        print(f"kernelzoo: wrote {len(data['records'])} winner(s) to {args.file}", file=sys.stderr)
    return 0


def run_import(args: argparse.Namespace) -> int:
    import torch

    if args.shipped == (args.file is not None):
        raise ArgumentError("db import: pass an export FILE, or --shipped (not both)")
    if args.shipped:
        from kernelzoo.db import import_shipped

        done = import_shipped(args.db)
        print(f"kernelzoo: imported {sum(r.imported for _, r in done)} shipped winner(s) from {len(done)} file(s) "
              "not imported before")
        return 0

    from kernelzoo.db.store import open_store
    from kernelzoo.db.transfer import import_winners, read_file
    from kernelzoo.fingerprint import cpu_fingerprint, gpu_fingerprint

    found = read_file(Path(args.file))
    local = [cpu_fingerprint()]
    if torch.cuda.is_available():
        local += [gpu_fingerprint(i) for i in range(torch.cuda.device_count())]
    hashes = {fp.hash for fp in local}
    result = import_winners(open_store(args.db), found, local[0], any_device=args.any_device,
                            match=lambda fp: fp.hash in hashes)
    print(f"kernelzoo: imported {result.imported} of {len(found)} winner(s); skipped {result.other_device} of "
          f"other devices (--any-device imports them), {result.kept} whose key holds a winner tuned here")
    return 0


def run_prune(args: argparse.Namespace) -> int:
    from kernelzoo.db.prune import prune
    from kernelzoo.db.store import open_store
    from kernelzoo.registry import registry

    registry.load()
    done = prune(open_store(args.db), older_than_days=args.older_than)
    print(f"kernelzoo: dropped {done.winners} stale winner(s), {done.studies} Optuna studies and "
          f"{done.trials} trial record(s)")
    return 0


def run_upgrade(args: argparse.Namespace) -> int:
    from kernelzoo.db import default_url, schema
    from kernelzoo.db.store import Store

    store = Store(args.db or default_url())
    before, after = schema.upgrade(store)
    print(f"kernelzoo: {store.display_url} is at schema version {after}" +
          (f" (upgraded from {before})" if before != after else " (nothing to do)"))
    return 0


def run_snapshot(args: argparse.Namespace) -> int:
    from kernelzoo.db.snapshot import write_snapshot
    from kernelzoo.db.store import open_store

    digest = write_snapshot(open_store(args.db), args.file, op=args.op)
    print(digest)
    print(f"kernelzoo: wrote the winners snapshot {args.file}; use it with KERNELZOO_DB=snapshot:{args.file}",
          file=sys.stderr)
    return 0
