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

from kernelzoo.commands._common import add_db, add_json, add_keys, check_device, check_ops, check_plugins, print_json
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
    add_keys(p, "the op (repeatable: then --output and --plot paths need {op})",
                  plugins="every plugin of the op that runs on the device",
                  dtypes="every dtype torch takes on the device")
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
    host = p.add_argument_group("host cost (--host)")
    host.add_argument("--host", action="store_true", help="host µs per call instead: torch's own op, "
                      "kernelzoo.ops (auto) and each plugin forced, on small inputs, forward and forward+backward, "
                      "with the ratio to torch (default ops: the call-path set; default devices: cpu, and cuda "
                      "if there is a GPU)")
    host.add_argument("--calls", type=int, default=200, help="--host: calls timed together (default 200)")
    host.add_argument("--rounds", type=int, default=9, help="--host: interleaved rounds, the median kept "
                      "(default 9)")
    host.add_argument("--split", action="store_true", help="--host: also each forward call layer by layer, "
                      "each plugin forced: the signature lookup, the Call, the plugin's run, what they leave, and the "
                      "checks and choice a signature's first call makes")
    host.add_argument("--threads", type=int, help="--host: torch's CPU threads while measuring (default: as "
                      "set; 1 keeps a loaded machine's descheduled thread out of torch's parallel regions)")
    step = p.add_argument_group("mytorch step (--mytorch-step)")
    step.add_argument("--mytorch-step", action="store_true", help="time a transformer training step instead: "
                      "torch eager, torch.compile, mytorch eager and mytorch as one CUDA graph, interleaved, "
                      "median ms per step, at (batch, seq, dim, heads, blocks) = 32,256,512,8,4; 8,128,256,4,2; "
                      "8,1024,1024,16,4")
    step.add_argument("--config", action="append", metavar="B,L,D,H,N", help="--mytorch-step: batch, seq, dim, "
                      "heads, blocks (repeatable; default: the three above)")
    step.add_argument("--runner", action="append", help="--mytorch-step: only this runner (repeatable): torch, "
                      "torch.compile, mytorch, 'mytorch graphed'")
    step.add_argument("--steps", type=int, default=20, help="--mytorch-step: timed steps per runner (default 20)")
    step.add_argument("--quick", action="store_true", help="--mytorch-step: a tiny model and 3 steps (a smoke test)")
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


def _host(args: argparse.Namespace) -> int:
    from kernelzoo.bench.host import OPS, format_rows, format_split, json_data, measure, split, write_json

    ops = args.op or list(OPS)
    for op in ops:
        registry.op(op)  # UnknownError listing the ops
    if args.calls < 1 or args.rounds < 1:
        raise ArgumentError(f"bench: --calls and --rounds must be >= 1, got {args.calls}, {args.rounds}")
    devices = [_device(args.device)] if args.device else [torch.device("cpu")] + (
        [torch.device("cuda")] if torch.cuda.is_available() else [])
    if args.threads is not None:
        if args.threads < 1:
            raise ArgumentError(f"bench: --threads must be >= 1, got {args.threads}")
        torch.set_num_threads(args.threads)
    rows = []
    for device in devices:
        rows += measure(ops, device, calls=args.calls, rounds=args.rounds, plugins=args.plugin,
                        progress=lambda what: print(f"  {what} ...", file=sys.stderr, flush=True))
    if not args.json:
        print(format_rows(rows))
    splits = []
    if args.split:
        for device in devices:
            splits += split(ops, device, calls=args.calls, rounds=args.rounds, plugins=args.plugin)
            if not args.json:
                print()
                print(format_split([r for r in splits if r.device == device.type]))
    if args.output:
        write_json(args.output, rows, sys.argv[1:], splits)
    if args.json:
        print_json(json_data(rows, sys.argv[1:], splits))
    return 0


def _config(text: str) -> tuple[int, int, int, int, int]:
    try:
        values = tuple(int(v) for v in text.split(","))
    except ValueError:
        values = ()
    if len(values) != 5 or min(values) < 1 or values[2] % values[3]:
        raise ArgumentError(f"bench: --config takes batch,seq,dim,heads,blocks, positive, dim a multiple of heads; "
                            f"got {text!r}")
    return values  # type: ignore[return-value]


def _mytorch_step(args: argparse.Namespace) -> int:
    import json

    from kernelzoo.bench.host import meta
    from kernelzoo.bench.step import CONFIGS, QUICK_CONFIGS, RUNNERS, format_rows, measure

    configs = [_config(c) for c in args.config] if args.config else list(QUICK_CONFIGS if args.quick else CONFIGS)
    runners = args.runner or list(RUNNERS)
    unknown = sorted(set(runners) - set(RUNNERS))
    if unknown:
        raise ArgumentError(f"bench: unknown --runner {', '.join(unknown)}; expected {', '.join(RUNNERS)}")
    steps = 3 if args.quick else args.steps
    if steps < 1:
        raise ArgumentError(f"bench: --steps must be >= 1, got {steps}")
    device = _device(args.device)
    rows = measure(configs, device, steps=steps, warmup=1 if args.quick else 3, vocab=64 if args.quick else 1000,
                   runners=runners, progress=lambda what: print(f"  {what} ...", file=sys.stderr, flush=True))
    if not args.json:
        print(format_rows(rows))
    info = meta([], sys.argv[1:])
    info["devices"] = {device.type: torch.cuda.get_device_name() if device.type == "cuda" else "cpu"}
    data = {"meta": info, "rows": [r.to_dict() for r in rows]}
    if args.output:
        from pathlib import Path

        Path(args.output).parent.mkdir(parents=True, exist_ok=True)
        Path(args.output).write_text(json.dumps(data, indent=1) + "\n")
    if args.json:
        print_json(data)
    return 1 if any(r.status == "failed" for r in rows) else 0


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
    if args.host:
        return _host(args)
    if args.mytorch_step:
        return _mytorch_step(args)
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
