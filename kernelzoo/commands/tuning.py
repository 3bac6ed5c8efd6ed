"""``kernelzoo tune`` (search, verify, time, store winners) and ``kernelzoo show`` (the stored winners).

A new flag of ``tune`` is an ``add_argument`` in :func:`register` and is read in :func:`run_tune`, which plans the
keys (:mod:`kernelzoo.autotune`), runs them and prints the report.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Any

from kernelzoo.commands._common import (
    EXIT_CODES,
    FAILED,
    OK,
    UNTUNED,
    add_db,
    add_json,
    add_keys,
    add_verbose,
    check_device,
    check_ops,
    check_plugins,
    print_json,
)
from kernelzoo.errors import ArgumentError
from kernelzoo.registry import registry
from kernelzoo.table import format_table


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "tune", help="search each plugin's configs, verify and time them, store the winners",
        description="Search each plugin's config space with Optuna (exhaustively when it has no more configs than "
        "--trials, else TPE), run every trial in a worker process on fresh inputs, check it against the op's "
        "reference, time it, and store each plugin's best per device, dtype and shape bucket. Interrupted runs "
        "resume. KERNELZOO_EXTRA_PLUGINS=mod1,mod2 registers plugin modules that have no entry point yet. Prints "
        "an overall progress bar on stderr and a summary table at the end (-v: every key's table).",
        epilog=EXIT_CODES + ".")
    add_keys(p, "the op to tune (repeatable; optional with --pending)",
                  plugins="every plugin dispatch may choose on the device",
                  dtypes="all the plugins take, or those the op names for tuning on the device")
    # 20 keeps `kernelzoo tune --op matmul` well under 10 minutes while TPE still finds the good tiles
    # (docs/tuning.md)
    p.add_argument("--trials", type=int, default=20, help="trials per plugin and key, resumed runs included "
                   "(default 20; a smaller config space is searched exhaustively)")
    p.add_argument("--timeout", type=float, default=60.0, help="seconds one trial may take, compile included "
                   "(default 60)")
    p.add_argument("--budget-ms", type=float, default=200.0, help="measuring time per trial (default 200)")
    p.add_argument("--seed", type=int, default=0, help="TPE's seed and the inputs' base seed (default 0)")
    p.add_argument("--pending", action="store_true", help="tune the keys programs called without a tuned winner")
    p.add_argument("--quiet", action="store_true", help="no progress on stderr")
    add_json(p, "the report (every key, plugin and failure); with --status, the job's status")
    add_verbose(p)
    add_db(p)
    fleet = p.add_argument_group("tuning as a job shared by several workers and hosts (docs/tuning.md)")
    fleet.add_argument("--devices", help="one worker per GPU: indices like 0,1 or 'all'")
    fleet.add_argument("--workers", type=int, help="this many worker processes on --device (the CPU's, say)")
    fleet.add_argument("--budget", help="stop claiming work (with --stale/--verify: starting keys) after this long "
                       "(600, 90s, 10m, 1.5h); rerun to resume")
    fleet.add_argument("--floor-within", type=float, metavar="PCT", help="end a key once a verified trial is "
                       "within PCT %% of the roofline floor")
    fleet.add_argument("--job", help="the job's name (default: a hash of what is tuned, the same on every host)")
    fleet.add_argument("--lease", type=float, default=60.0, help="seconds a claim outlives a lost worker "
                       "(default 60)")
    fleet.add_argument("--status", action="store_true", help="show the newest (or --job) job: keys done, "
                       "claimed, left, ETA")
    p.add_argument("--stale", action="store_true", help="re-time the configs of stale records (their kernel's "
                   "code changed since tuning) under the installed code, first; with --pending, then those keys")
    p.add_argument("--verify", action="store_true", help="re-time the top configs of each provisional key (its records "
                   "borrowed from a sibling GPU: the plugins within 1.5x of its fastest) here and store the winners "
                   "as this GPU's own")
    p.add_argument("--missing", metavar="FILE", help="tune only the (key, plugin) pairs of the ops' representative "
                   "keys that the winners FILE (a shipped file of this GPU) lacks; with --budget, key by key until "
                   "it is spent")
    p.set_defaults(func=run_tune)

    s = sub.add_parser("show", help="list the stored winners")
    s.add_argument("--op", help="only this op")
    s.add_argument("--all", action="store_true", help="every plugin's best per key, stale ones too")
    add_json(s, "a list of records")
    add_db(s)
    s.set_defaults(func=run_show)


def _options(args: argparse.Namespace) -> Any:
    from kernelzoo.tuner.search import TuneOptions

    if args.trials < 1 or args.timeout <= 0 or args.budget_ms <= 0:
        raise ArgumentError(f"--trials must be >= 1, --timeout and --budget-ms > 0; got {args.trials}, "
                            f"{args.timeout}, {args.budget_ms}")
    return TuneOptions(trials=args.trials, timeout_s=args.timeout, budget_ms=args.budget_ms, seed=args.seed)


def run_tune(args: argparse.Namespace) -> int:
    from kernelzoo.autotune import TuneReport, plan_op, plan_pending, run_jobs
    from kernelzoo.db.store import open_store
    from kernelzoo.tuner.pool import WorkerPool
    from kernelzoo.tuner.progress import Progress
    from kernelzoo.tuner.report import format_report

    registry.load()
    if args.status:
        from kernelzoo.tuner.fleet import show_status

        return show_status(open_store(args.db), args.job, args.json)
    if not args.op and not (args.pending or args.stale or args.verify or args.missing):
        raise ArgumentError("tune: pass --op OP (or --pending, --stale, --verify, --missing FILE)")
    ops = check_ops(args.op)
    check_plugins(args.plugin, ops or None)
    device = check_device(args.device, "tune")
    options = _options(args)
    progress = Progress(enabled=not args.quiet, verbose=args.verbose)
    store = open_store(args.db, check=True, write=True)
    shared = not store.url.startswith("sqlite")  # a server database (PostgreSQL): tuners on other hosts join
    fleet_options = args.devices or args.workers or args.budget or args.floor_within is not None
    if (fleet_options or shared) and not (args.stale or args.verify or args.missing):
        from kernelzoo.tuner import fleet
        from kernelzoo.tuner.jobs import parse_duration

        args.budget = parse_duration(args.budget) if args.budget else None
        if args.lease <= 0:
            raise ArgumentError(f"--lease must be > 0 seconds, got {args.lease}")
        return fleet.run(args, store, options, progress)
    report = TuneReport()
    with WorkerPool(options.timeout_s) as pool:
        if args.stale or args.verify:
            from kernelzoo.tuner.jobs import parse_duration
            from kernelzoo.tuner.retime import tune_stale, tune_verify

            budget = parse_duration(args.budget) if args.budget else None
            began = time.monotonic()
            for wanted, retime, what in ((args.stale, tune_stale, "stale records"),
                                         (args.verify, tune_verify, "provisional records")):
                for op in (ops or [None]) if wanted else ():
                    found = retime(store, pool, device=device, op=op, plugins=args.plugin, options=options,
                                   progress=progress,
                                   budget_s=None if budget is None else budget - (time.monotonic() - began))
                    if not found:
                        progress.note(f"kernelzoo: no {what}{f' of {op}' if op else ''} on {device}", file=sys.stderr)
                    report.keys += found
        if args.missing:
            from pathlib import Path

            from kernelzoo.tuner.jobs import parse_duration
            from kernelzoo.tuner.missing import tune_missing

            report.keys += tune_missing(store, pool, Path(args.missing), device=device, ops=ops or None,
                                        plugins=args.plugin, options=options, progress=progress,
                                        budget_s=parse_duration(args.budget) if args.budget else None)
        jobs = []
        if args.pending:
            jobs = [job for op in ops or [None]
                    for job in plan_pending(store, pool, device, op, args.plugin, report.skipped)]
            if not jobs and not report.skipped:
                progress.note(f"kernelzoo: no pending keys on {device}")
        elif not (args.stale or args.verify or args.missing):
            for op in ops:
                spec = registry.op(op)
                shapes = [spec.parse_shape(s) for s in args.shape] if args.shape else None
                jobs += plan_op(op, device, plugins=args.plugin, shapes=shapes, dtypes=args.dtype)
        run_jobs(store, pool, jobs, plugins=args.plugin, options=options, progress=progress, report=report)
    if args.json:
        print_json(report.to_dict())
    else:
        if args.verbose:
            for key in report.keys:
                print(format_report(key), end="\n\n")
        print(report.summary())
    if report.ok:
        return OK
    if not any(p.result is not None for r in report.keys for p in r.plugins):
        print("kernelzoo: nothing could be tuned on this machine; the summary says why", file=sys.stderr)
        return FAILED
    return UNTUNED


def run_show(args: argparse.Namespace) -> int:
    from kernelzoo.db.lifecycle import is_stale, stale_reason
    from kernelzoo.db.ranking import by_key
    from kernelzoo.db.records import winners
    from kernelzoo.db.store import open_store
    from kernelzoo.db.transfer import to_record

    registry.load()
    check_ops([args.op] if args.op else None)
    rows = winners(open_store(args.db), op=args.op)
    found = []
    n_stale = 0
    for winner, candidates, stale in by_key(rows):
        # a key whose records are all stale shows them, so that what needs `tune --stale` is seen
        shown = candidates + stale if args.all else [winner] if winner is not None else stale
        n_stale += sum(is_stale(w) for w in stale)
        for w in shown:
            record = {k: v for k, v in to_record(w).items() if k != "device"}
            record.update(device=w.device.describe(), winner=w is winner, stale=w in stale,
                          stale_reason=stale_reason(w) if w in stale else None)
            found.append(record)
    if args.json:
        print_json(found)
        return 0
    table = [(r["op"], r["device"], r["dtype"], r["shape"], ",".join(map(str, r["bucket"])), r["flags"] or "-",
              r["plugin"] + (" *" if r["winner"] and args.all else ""), f"{r['time_ms']:.4g}",
              json.dumps(r["config"]), r["origin"] + (f" (stale: {r['stale_reason']})" if r["stale"] else ""))
             for r in found]
    print(format_table(("op", "device", "dtype", "shape", "bucket", "flags", "plugin", "ms", "config", "origin"),
                       table) if table else "no stored winners")
    if n_stale:
        print(f"{n_stale} stale record(s), kept but not run: `kernelzoo tune --stale` re-times their configs")
    return 0
