"""``kernelzoo demo``: ops on every available plugin, each output's error against the float64 reference as a
fraction of the op's tolerance, and its time against torch's, on one representative input per op.

By default a tour of a few ops that finishes in well under a minute on two CPU cores; ``--full`` runs every op.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Iterator
from typing import Any

import torch

from kernelzoo.commands._common import FAILED, OK, add_json, check_device, check_ops, print_json
from kernelzoo.registry import Implementation, Op, parse_dtype, registry
from kernelzoo.table import format_table

# the default tour: elementwise ops, a row reduction, a GEMM, a layer, attention
TOUR = ("relu", "add", "softmax", "matmul", "layer_norm", "attention")
BUDGET_MS = {False: 20.0, True: 50.0}  # measuring time per plugin: the tour, --full
SECONDS_PER_RUN = {"cpu": 1.2, "cuda": 0.3}  # a plugin's check and timing, for the estimate said up front


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("demo", help="run ops on every available plugin: error vs tolerance and time vs torch",
                       description="Run each op on every plugin available here, on one representative input: "
                       "check the output against the float64 reference (the error as a fraction of the op's "
                       f"tolerance: 0.05 means 5 %% of what is allowed) and time it against torch. By default the "
                       f"ops {', '.join(TOUR)}; --full runs every op.")
    p.add_argument("--device", help="cpu or cuda (default: cuda if there is a GPU)")
    p.add_argument("--dtype", default="float32", help="float32, float16 or bfloat16 (default float32)")
    p.add_argument("--op", action="append", help="only these ops (repeatable)")
    p.add_argument("--full", action="store_true", help="every op, with longer timings (minutes on a CPU)")
    add_json(p, "one object per plugin run")
    p.set_defaults(func=run)


def _tensors(value: Any) -> Iterator[torch.Tensor]:
    """The tensors of an output, in order (a tensor, or tuples and lists of them: the foreach updates)."""
    if isinstance(value, torch.Tensor):
        yield value
    elif isinstance(value, (tuple, list)):
        for item in value:
            yield from _tensors(item)


def tolerance_used(spec: Op, call: Any, outputs: Any, reference: Any) -> float:
    """The largest error of the floating-point outputs as a fraction of the op's tolerance for the call:
    max |out - ref| / (atol + rtol |ref|) over the finite reference elements (1 is the limit)."""
    tol = spec.tolerance(call)
    worst = 0.0
    for out, ref in zip(_tensors(outputs), _tensors(reference)):
        if not out.is_floating_point() or out.numel() != ref.numel() or out.numel() == 0:
            continue
        got = out.detach().to("cpu", torch.float64).reshape(-1)  # copy_'s reference is flat
        want = ref.detach().to("cpu", torch.float64).reshape(-1)
        finite = torch.isfinite(want) & torch.isfinite(got)
        if bool(finite.any()):
            err = (got - want).abs()[finite] / (tol.atol + tol.rtol * want.abs()[finite])
            worst = max(worst, float(err.max()))
    return worst


def _plugins(spec: Op, call: Any, device: torch.device) -> list[Implementation]:
    return [impl for impl in registry.implementations(spec.name)
            if registry.availability(impl) and impl.supports(call) is None and device.type in impl.devices()]


def _run_op(name: str, device: torch.device, dtype: torch.dtype, budget_ms: float) -> tuple[str, list[dict]]:
    """One op on each of its plugins here: the call's description and a row per plugin."""
    from kernelzoo.bench.cases import restorer
    from kernelzoo.timing import time_fn

    spec = registry.op(name)
    call = spec.example(spec.shapes[device.type][-1], dtype, device, torch.Generator().manual_seed(0))
    ref = spec.reference(call)
    # in-place ops (the optimizer updates, copy_) overwrite their inputs: every run starts from the originals
    restore = restorer(spec, call)
    rows = []
    for impl in _plugins(spec, call, device):
        config = impl.config()
        row: dict[str, Any] = {"op": name, "plugin": impl.plugin, "call": call.describe(), "device": str(device)}
        try:
            out = impl.run(call, config)
            mismatch = spec.verify(call, out, ref)
            row.update(error=tolerance_used(spec, call, out, ref), check="ok" if mismatch is None else "WRONG",
                       why=str(mismatch) if mismatch else "")
            row["ms"] = time_fn(lambda impl=impl, config=config: impl.run(call, config), device,
                                budget_ms=budget_ms, setup=restore).median_ms
        except Exception as exc:  # a plugin that raises is a row of the table, not the end of the demo
            row.update(error=None, ms=None, check="FAILED", why=f"{type(exc).__name__}: {str(exc).splitlines()[0]}")
        finally:
            restore()
        rows.append(row)
    torch_ms = next((r["ms"] for r in rows if r["plugin"] == "torch" and r["ms"]), None)
    for r in rows:
        r["vs_torch"] = torch_ms / r["ms"] if torch_ms and r["ms"] else None
    return call.describe(), rows


def _table(title: str, rows: list[dict]) -> str:
    def error(r: dict) -> str:
        if r["error"] is None:
            return "-"
        # ops with their own rule (attention: against the same math in the input precision) may pass above 1
        return f"{r['error']:.2g}" + (" (own rule)" if r["check"] == "ok" and r["error"] > 1 else "")

    table = [(r["plugin"], error(r), r["check"] if r["check"] != "FAILED" else f"FAILED: {r['why'][:80]}",
              f"{r['ms']:.4f}" if r["ms"] else "-", f"{r['vs_torch']:.2f}x" if r["vs_torch"] else "-") for r in rows]
    return format_table(("plugin", "error / allowed", "check", "ms", "vs torch"), table, title=title)


def run(args: argparse.Namespace) -> int:
    from kernelzoo.calibrate import current_load, load_note, usable_cores
    from kernelzoo.tuner.progress import Progress

    registry.load()
    names = check_ops(args.op) if args.op else sorted(registry.ops) if args.full else list(TOUR)
    device = torch.device(check_device(args.device, "demo"))
    dtype = parse_dtype(args.dtype)
    names = [n for n in names if registry.op(n).shapes.get(device.type)]
    runs = sum(1 for n in names for impl in registry.implementations(n)
               if registry.availability(impl) and device.type in impl.devices())
    estimate = 5 * round((3 + runs * SECONDS_PER_RUN[device.type] * (3 if args.full else 1)) / 5 + 0.5)
    more = "" if args.full or args.op else f"; --full runs all {len(registry.ops)} ops"
    print(f"kernelzoo demo: {len(names)} ops on each plugin available on {device} ({args.dtype}): every output "
          f"checked against the float64 reference (error / allowed: the share of the op's tolerance it uses) and "
          f"timed against torch; about {estimate} s{more}", file=sys.stderr, flush=True)
    progress = Progress()
    progress.plan(len(names), "demo", "ops")
    start, everything, load = time.monotonic(), [], [current_load()]
    for name in names:
        title, rows = _run_op(name, device, dtype, BUDGET_MS[bool(args.full)])
        everything += rows
        progress.step(name)
        if not args.json:
            progress.note(_table(f"\n{title} on {device}", rows), file=sys.stdout)
    progress.close()
    load.append(current_load())
    busy = load_note([x for x in load if x is not None], usable_cores())
    bad = [r for r in everything if r["check"] != "ok"]
    if args.json:
        print_json(everything)
    else:
        print(f"\n{len(names)} ops, {len(everything)} plugin runs in {time.monotonic() - start:.0f} s: " +
              ("every output within tolerance" if not bad else
               f"{len(bad)} not ok: " + ", ".join(f"{r['op']}/{r['plugin']} {r['check']}" for r in bad)))
        if busy:
            print(f"note: {busy}")
    return FAILED if bad else OK
