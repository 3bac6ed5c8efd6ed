"""``kernelzoo tune`` (search, verify, time, store winners) and ``kernelzoo show`` (the stored winners)."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from kernelzoo.errors import ArgumentError
from kernelzoo.registry import registry
from kernelzoo.table import format_table


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "tune", help="search each plugin's configs, verify and time them, store the winners",
        description="Search each plugin's config space with Optuna (exhaustively when it has no more configs than "
        "--trials, else TPE), run every trial in a worker process on fresh inputs, check it against the op's "
        "reference, time it, and store each plugin's best per device, dtype and shape bucket. Interrupted runs "
        "resume. KERNELZOO_EXTRA_PLUGINS=mod1,mod2 registers plugin modules that have no entry point yet.")
    p.add_argument("--op", help="the op to tune (optional with --pending)")
    p.add_argument("--plugin", action="append", help="only this plugin (repeatable; default: every plugin "
                   "dispatch may choose on the device)")
    p.add_argument("--shape", action="append", help="a shape like 4096x4096 (repeatable; default: the op's "
                   "representative shapes)")
    p.add_argument("--dtype", action="append", help="float32, float16 or bfloat16 (repeatable; default: all "
                   "the plugins take, or those the op names for tuning on the device)")
    p.add_argument("--device", help="cpu or cuda (default: cuda if there is a GPU)")
    # 20: on the H100, 10 trials per plugin and key tuned matmul's 24 keys in 153 s; 20 keeps
    # `kernelzoo tune --op matmul` well under 10 minutes while TPE still finds the good tiles
    p.add_argument("--trials", type=int, default=20, help="trials per plugin and key, resumed runs included "
                   "(default 20; a smaller config space is searched exhaustively)")
    p.add_argument("--timeout", type=float, default=60.0, help="seconds one trial may take, compile included "
                   "(default 60)")
    p.add_argument("--budget-ms", type=float, default=200.0, help="measuring time per trial (default 200)")
    p.add_argument("--seed", type=int, default=0, help="TPE's seed and the inputs' base seed (default 0)")
    p.add_argument("--pending", action="store_true", help="tune the keys programs called without a tuned winner")
    p.add_argument("--quiet", action="store_true", help="no progress line")
    p.add_argument("--db", help="SQLAlchemy URL of the tuning database (default: $KERNELZOO_DB or the cache dir)")
    p.set_defaults(func=run_tune)

    s = sub.add_parser("show", help="list the stored winners")
    s.add_argument("--op", help="only this op")
    s.add_argument("--all", action="store_true", help="every plugin's best per key, stale ones too")
    s.add_argument("--json", action="store_true", help="print a JSON list of objects")
    s.add_argument("--db", help="SQLAlchemy URL of the tuning database")
    s.set_defaults(func=run_show)


def _options(args: argparse.Namespace) -> Any:
    from kernelzoo.tuner.search import TuneOptions

    if args.trials < 1 or args.timeout <= 0 or args.budget_ms <= 0:
        raise ArgumentError(f"--trials must be >= 1, --timeout and --budget-ms > 0; got {args.trials}, "
                            f"{args.timeout}, {args.budget_ms}")
    return TuneOptions(trials=args.trials, timeout_s=args.timeout, budget_ms=args.budget_ms, seed=args.seed)


def run_tune(args: argparse.Namespace) -> int:
    from kernelzoo.db.store import open_store
    from kernelzoo.tuner.pending import tune_pending
    from kernelzoo.tuner.pool import WorkerPool
    from kernelzoo.tuner.progress import Progress
    from kernelzoo.tuner.report import format_report
    from kernelzoo.tuner.tune import default_device, tune_op

    registry.load()
    if not args.op and not args.pending:
        raise ArgumentError("tune: pass --op OP (or --pending)")
    device = args.device or default_device()
    if device.split(":")[0] not in ("cpu", "cuda"):
        raise ArgumentError(f"tune: --device must be cpu or cuda, got {device!r}")
    options, progress = _options(args), Progress(enabled=not args.quiet)
    store = open_store(args.db, check=True, write=True)
    with WorkerPool(options.timeout_s) as pool:
        if args.pending:
            reports = tune_pending(store, pool, device=device, op=args.op, plugins=args.plugin, options=options,
                                   progress=progress)
            if not reports:
                print(f"kernelzoo: no pending keys on {device}", file=sys.stderr)
        else:
            spec = registry.op(args.op)
            shapes = [spec.parse_shape(s) for s in args.shape] if args.shape else None
            params = list(getattr(spec, "variants", None) or ({},))
            reports = tune_op(store, pool, args.op, device=device, plugins=args.plugin, shapes=shapes,
                              dtypes=args.dtype, params=params, options=options, progress=progress)
    for report in reports:
        print(format_report(report))
        print()
    return 0


def run_show(args: argparse.Namespace) -> int:
    from kernelzoo.db.ranking import by_key
    from kernelzoo.db.records import winners
    from kernelzoo.db.store import open_store
    from kernelzoo.db.transfer import to_record

    registry.load()
    if args.op:
        registry.op(args.op)  # UnknownError listing the ops
    rows = winners(open_store(args.db), op=args.op)
    found = []
    for winner, candidates, stale in by_key(rows):
        shown = candidates + stale if args.all else [winner] if winner is not None else []
        for w in shown:
            record = {k: v for k, v in to_record(w).items() if k != "device"}
            record.update(device=w.device.describe(), winner=w is winner, stale=w in stale)
            found.append(record)
    if args.json:
        print(json.dumps(found, indent=2))
        return 0
    table = [(r["op"], r["device"], r["dtype"], r["shape"], ",".join(map(str, r["bucket"])), r["flags"] or "-",
              r["plugin"] + (" *" if r["winner"] and args.all else ""), f"{r['time_ms']:.4g}",
              json.dumps(r["config"]), r["origin"] + (" (stale)" if r["stale"] else "")) for r in found]
    print(format_table(("op", "device", "dtype", "shape", "bucket", "flags", "plugin", "ms", "config", "origin"),
                       table) if table else "no stored winners")
    return 0
