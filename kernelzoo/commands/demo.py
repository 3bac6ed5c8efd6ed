"""``kernelzoo demo``: every op on every available plugin, its error against the float64
reference and its time against torch's, on one representative input per op."""

from __future__ import annotations

import argparse
from typing import Any

import torch

from kernelzoo.bench.cases import restorer
from kernelzoo.registry import parse_dtype, registry
from kernelzoo.table import format_table
from kernelzoo.timing import time_fn


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("demo", help="run each op on every available plugin: error and time vs torch")
    p.add_argument("--device", choices=("cpu", "cuda"), help="default: cuda if there is a GPU")
    p.add_argument("--dtype", default="float32")
    p.add_argument("--op", action="append", help="only these ops (repeatable)")
    p.set_defaults(func=run)


def _first_tensor(value: Any) -> torch.Tensor:
    """The first tensor of an output (a tensor, or tuples of them: the foreach updates return one per list)."""
    while isinstance(value, (tuple, list)):
        value = value[0]
    return value


def _max_rel_error(out: torch.Tensor, ref: torch.Tensor) -> float:
    # element by element in logical order (copy_'s reference is flat)
    out, ref = out.double().cpu().reshape(-1), ref.cpu().reshape(-1)
    finite = torch.isfinite(ref)
    if not bool(finite.any()):
        return 0.0
    return float(((out - ref).abs()[finite] / ref.abs()[finite].clamp_min(1e-6)).max())


def run(args: argparse.Namespace) -> int:
    device = torch.device(args.device or ("cuda" if torch.cuda.is_available() else "cpu"))
    dtype = parse_dtype(args.dtype)
    generator = torch.Generator().manual_seed(0)
    for name in sorted(registry.load().ops):
        if args.op and name not in args.op:
            continue
        op = registry.op(name)
        shapes = op.shapes.get(device.type) or []
        if not shapes:
            continue
        call = op.example(shapes[-1], dtype, device, generator)  # the smallest representative
        ref = op.reference(call)
        # in-place ops (the optimizer updates, copy_) overwrite their inputs: every run starts from the originals
        # (restored before each timed run and after each plugin)
        restore = restorer(op, call)
        rows, torch_ms = [], None
        for impl in registry.implementations(name):
            if not registry.availability(impl) or impl.supports(call) or device.type not in impl.devices():
                continue
            config = impl.config()
            try:
                out = impl.run(call, config)
                ok = op.verify(call, out, ref) is None
                error = f"{_max_rel_error(_first_tensor(out), _first_tensor(ref)):.2e}"
                ms = time_fn(lambda impl=impl, call=call, config=config: impl.run(call, config), device,
                             budget_ms=50, setup=restore).median_ms
            except Exception as exc:  # a plugin that raises is a row of the table, not the end of the demo
                rows.append([impl.plugin, "-", f"FAILED: {type(exc).__name__}: {str(exc).splitlines()[0][:80]}", None])
                continue
            finally:
                restore()
            torch_ms = ms if impl.plugin == "torch" else torch_ms
            rows.append([impl.plugin, error, "ok" if ok else "WRONG", ms])
        for row in rows:
            row.append(f"{torch_ms / row[3]:.2f}x" if torch_ms and row[3] else "-")
            row[3] = f"{row[3]:.4f}" if row[3] else "-"
        title = f"\n{call.describe()} on {device}"
        print(format_table(("plugin", "max rel err", "check", "ms", "vs torch"), rows, title=title))
    return 0
