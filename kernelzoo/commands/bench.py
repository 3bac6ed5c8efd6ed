"""``kernelzoo bench``: every plugin of an op against torch, per shape: time, rates, % of the floor, the ratio
to torch and dispatch's choice; ``--json`` prints every row on stdout, ``--output`` writes them to a file,
``--plot`` draws throughput against size."""

from __future__ import annotations

import argparse
import importlib.util
import os
import sys
from typing import Any

import torch

from kernelzoo.commands._common import add_db, add_json, check_device, check_ops, check_plugins, print_json
from kernelzoo.errors import ArgumentError, UnsupportedError
from kernelzoo.registry import registry


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "bench", help="time every plugin of an op against torch: rates, %% of the floor, JSON, plots",
        description="Time every plugin of an op in this process (CUDA events with the L2 flushed on the GPU, "
        "median of many runs after a warm-up) on fresh random inputs of each representative shape and dtype, "
        "each with its tuned config where one is stored, else its default. Per shape: the median and its noise, "
        "TFLOP/s and GB/s, % of the floor (max(FLOPs / peak, bytes / bandwidth) from the device's ceilings: "
        "built in for known GPUs, else measured once by --calibrate and stored), the ratio to torch (above 1: "
        "faster) and, starred, the plugin kernelzoo.ops would run.")
    p.add_argument("--op", action="append", help="the op (repeatable: then --output and --plot paths need {op})")
    p.add_argument("--plugin", action="append", help="only this plugin (repeatable; default: every plugin of the "
                   "op that runs on the device)")
    p.add_argument("--shape", action="append", help="a shape like 4096x4096 (repeatable; default: the op's "
                   "representative shapes)")
    p.add_argument("--dtype", action="append", help="float32, float16 or bfloat16 (repeatable; default: every "
                   "dtype torch takes on the device)")
    p.add_argument("--device", help="cpu or cuda (default: cuda if there is a GPU)")
    add_json(p, "every row and where it was measured ({\"meta\": ..., \"rows\": [...]}), instead of the tables")
    p.add_argument("--output", metavar="FILE.json", help="also write the JSON of each op to FILE.json")
    p.add_argument("--plot", metavar="FILE.png", help="plot throughput against size, a line per plugin")
    p.add_argument("--budget-ms", type=float, default=100.0, help="measuring time per plugin and shape "
                   "(default 100; at least 5 runs)")
    p.add_argument("--max-run-ms", type=float, default=1000.0, help="do not time a plugin whose one run takes "
                   "longer (default 1000)")
    p.add_argument("--seed", type=int, default=0, help="seed of the random inputs (default 0)")
    p.add_argument("--calibrate", action="store_true", help="measure the device's copy bandwidth and matmul "
                   "rates first (again, if they were measured before) and store them for it, with the noise and "
                   "the machine's load seen (a few seconds)")
    add_db(p)
    p.set_defaults(func=run)


def _device(name: str | None) -> torch.device:
    return torch.device(check_device(name, "bench"))


def _check(args: argparse.Namespace) -> None:
    if not args.op and not args.calibrate:
        raise ArgumentError("bench: pass --op OP (or --calibrate)")
    check_ops(args.op)
    for flag, path in (("--output", args.output), ("--plot", args.plot)):
        if path and len(args.op or ()) > 1 and "{op}" not in path:
            raise ArgumentError(f"bench: {flag} {path!r} with several ops must contain {{op}}, e.g. out/{{op}}.json")
    if args.plugin and args.op:
        check_plugins(args.plugin, args.op)
    if args.plot and importlib.util.find_spec("matplotlib") is None:  # before the run, not after it
        raise UnsupportedError("bench: --plot needs matplotlib, which is not installed here; "
                               "pip install matplotlib (or leave out --plot)")
    if args.budget_ms <= 0 or args.max_run_ms <= 0:
        raise ArgumentError(f"bench: --budget-ms and --max-run-ms must be > 0, got {args.budget_ms}, "
                            f"{args.max_run_ms}")


def _calibrate(device: torch.device, quiet: bool) -> dict[str, Any]:
    from kernelzoo.calibrate import calibrate, describe
    from kernelzoo.fingerprint import fingerprint

    measured = calibrate(device)
    if not quiet:  # with --json the calibration is part of the JSON
        print(f"calibrated {fingerprint(device).describe()}: {describe(measured)}; stored", flush=True)
    return measured


def run(args: argparse.Namespace) -> int:
    from kernelzoo.bench.cases import cases
    from kernelzoo.bench.plot import plot
    from kernelzoo.bench.report import format_group, write_json
    from kernelzoo.bench.run import bench_groups, meta
    from kernelzoo.calibrate import ceilings_here, load_note
    from kernelzoo.tuner.progress import Progress

    if args.db:
        os.environ["KERNELZOO_DB"] = args.db  # dispatch's winner lookup reads the same database
    registry.load()
    _check(args)
    device = _device(args.device)
    calibration = _calibrate(device, args.json) if args.calibrate else None
    ceilings = ceilings_here(device) if args.op else None
    planned = []
    for op in args.op or ():
        spec = registry.op(op)
        shapes = [spec.parse_shape(s) for s in args.shape] if args.shape else None
        plugins = [p for p in args.plugin if p in registry.impls[op]] if args.plugin else None
        found = cases(op, device.type, plugins=plugins, dtypes=args.dtype, shapes=shapes)
        if not found:
            print(f"kernelzoo: {op}: nothing to bench on {device.type} for these plugins, dtypes and shapes",
                  file=sys.stderr)
        planned.append((op, found))
    progress = Progress()
    progress.plan(sum(len({(c.dtype, c.shape, c.params) for c in found}) for _, found in planned), "bench", "shapes")
    everything: dict[str, Any] = {"meta": None, "rows": []}
    if calibration is not None:
        everything["calibration"] = calibration
    for op, found in planned:
        if not found:
            continue
        info = meta(device, ceilings, sys.argv[1:])
        rows = []
        for group in bench_groups(found, device, ceilings, budget_ms=args.budget_ms, max_run_ms=args.max_run_ms,
                                  seed=args.seed):
            progress.step(f"{op} {group[0].dtype} {group[0].shape}")
            if not args.json:
                progress.note(format_group(group, info["device"], info["ceilings"]) + "\n", file=sys.stdout)
            rows += group
        if hasattr(os, "getloadavg"):
            info["load"].append(os.getloadavg()[0])
        if (note := load_note(info["load"], info["cores"])) and not args.json:
            progress.note(f"note: {note}", file=sys.stdout)
        if args.output:
            write_json(args.output.replace("{op}", op), info, rows)
        if args.plot:
            plot(rows, info, args.plot.replace("{op}", op))
        everything["meta"] = everything["meta"] or info
        everything["rows"] += [r.to_dict() for r in rows]
    progress.close()
    if args.json:
        print_json(everything)
    return 0
