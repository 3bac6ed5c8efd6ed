"""``kernelzoo demo``: every op on every available plugin, its error against the float64
reference and its time against torch's, on one representative input per op."""

from __future__ import annotations

import argparse

import torch

from kernelzoo.registry import parse_dtype, registry
from kernelzoo.table import format_table
from kernelzoo.timing import time_fn


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("demo", help="run each op on every available plugin: error and time vs torch")
    p.add_argument("--device", choices=("cpu", "cuda"), help="default: cuda if there is a GPU")
    p.add_argument("--dtype", default="float32")
    p.add_argument("--op", action="append", help="only these ops (repeatable)")
    p.set_defaults(func=run)


def _max_rel_error(out: torch.Tensor, ref: torch.Tensor) -> float:
    out, ref = out.double().cpu(), ref.cpu()
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
        rows, torch_ms = [], None
        for impl in registry.implementations(name):
            if not registry.availability(impl) or impl.supports(call) or device.type not in impl.devices():
                continue
            config = impl.config()
            out = impl.run(call, config)
            first = out[0] if isinstance(out, tuple) else out
            reference = ref[0] if isinstance(ref, tuple) else ref
            ok = op.verify(call, out, ref) is None
            ms = time_fn(lambda impl=impl, call=call, config=config: impl.run(call, config), device,
                         budget_ms=50).median_ms
            torch_ms = ms if impl.plugin == "torch" else torch_ms
            rows.append([impl.plugin, f"{_max_rel_error(first, reference):.2e}", "ok" if ok else "WRONG", ms])
        for row in rows:
            row.append(f"{torch_ms / row[3]:.2f}x" if torch_ms else "-")
            row[3] = f"{row[3]:.4f}"
        title = f"\n{call.describe()} on {device}"
        print(format_table(("plugin", "max rel err", "check", "ms", "vs torch"), rows, title=title))
    return 0
