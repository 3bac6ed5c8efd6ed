"""layer_norm and layer_norm_backward on the GPU: the cuda and triton plugins over a grid of configs, against
torch and against a copy of the same bytes, per benchmark shape.

    python scripts/layer_norm_sweep.py [--dtype float32] [--op layer_norm] [--quick] [--shape 1024x65536] [--out DIR]
                                       [--plugin cuda] [--define NAME=VALUE] [--plain-launch]

For each shape of the op's GPU shapes: torch's kernel, a copy moving the same tensors (forward: y = x;
backward: dx = dy + x, its two reads and one write), the tuned dispatch, and every config of the grid
below. Each config's outputs are checked against torch's first (a wrong one is reported, not timed).
Times are medians of CUDA events with L2 flushed and the host's enqueue hidden (GPU time). The floor is
the op's bytes over the bandwidth of a 1 GiB copy measured in the same run. Prints a table per op and
writes layer_norm_sweep.json under --out.
"""

from __future__ import annotations

import argparse
import itertools
import json
from pathlib import Path

import torch

from kernelzoo import dispatch
from kernelzoo.errors import UnsupportedError
from kernelzoo.registry import registry
from kernelzoo.timing import time_fn


def ms(fn, budget_ms: float) -> float:
    return time_fn(fn, "cuda", budget_ms=budget_ms, hide_host=True).median_ms


def copy_bandwidth(budget_ms: float) -> float:
    """Bytes per ms of a 1 GiB device-to-device copy (read + write)."""
    src = torch.randn(1 << 28, device="cuda")
    dst = torch.empty_like(src)
    return 2 * src.numel() * 4 / ms(lambda: dst.copy_(src), budget_ms)


def grid(plugin: str, op: str, n: int, quick: bool) -> list[dict]:
    """Configs for rows of n: CLUSTER varies only where a row needs a cluster; the cuda forward's ways of walking
    rows (blocks_per_sm, PREFETCH) only where a row fits a block."""
    if plugin == "triton":
        blocks, warps = ([4096, 8192], [8]) if quick else ([1024, 2048, 4096, 8192, 16384], [4, 8, 16])
        return [{"BLOCK": b, "num_warps": w, "num_stages": 1} for b, w in itertools.product(blocks, warps)]
    threads, items, clusters = ([512], [8, 16], [4, 8]) if quick else ([256, 512, 1024], [4, 8, 16, 32], [2, 4, 8])
    backward = op == "layer_norm_backward"
    configs = []
    for t, i in itertools.product(threads, items):
        if t * i > 16384:
            continue
        split = n > t * i
        if backward:
            walks = [{"blocks_per_sm": b, "PREFETCH": p} for b, p in itertools.product([1, 2, 4], [0, 1])]
        elif split or quick:
            walks = [{}]
        else:  # a group per row, or groups walking rows, with and without the next row prefetched
            walks = [{"blocks_per_sm": 0}] + [{"blocks_per_sm": b, "PREFETCH": p}
                                              for b, p in itertools.product([1, 2, 4], [0, 1])]
        for c, walk in itertools.product(clusters if split else [8], walks):
            if not split or n <= t * i * c:
                configs.append({"THREADS": t, "ITEMS": i, "CLUSTER": c, **walk})
    return configs


def outputs_match(got, want) -> str | None:
    for name, g, w in zip(("out", "dw", "db"), got, want):
        scale = max(float(w.float().abs().max()), 1.0)
        err = float((g.float() - w.float()).abs().max()) / scale
        if not err <= 1e-3:
            return f"{name}: max error {err:.2e} of max |value| {scale:.2e}"
    return None


def sweep(op: str, shape: tuple, dtype: torch.dtype, quick: bool, budget_ms: float, defines: dict,
          plugins: list[str]) -> dict:
    spec = registry.op(op)
    call = spec.example(shape, dtype, "cuda", torch.Generator().manual_seed(0))
    n = shape[-1]
    reference = registry.impl(op, "torch")
    want = reference.run(call, {})
    if op == "layer_norm":
        x = call.inputs["x"]
        y = torch.empty_like(x)
        copy = ms(lambda: y.copy_(x), budget_ms)
    else:
        dy, x = call.inputs["grad_y"], call.inputs["x"]
        dx = torch.empty_like(x)
        copy = ms(lambda: torch.add(dy, x, out=dx), budget_ms)
    row = {"op": op, "shape": spec.shape_string(call), "bytes": spec.bytes(call), "copy": copy,
           "torch": ms(lambda: reference.run(call, {}), budget_ms),
           "dispatch": ms(lambda: dispatch.run_call(spec, call), budget_ms), "configs": []}
    for plugin in plugins:
        impl = registry.impl(op, plugin)
        for config in [impl.default_config, *grid(plugin, op, n, quick)]:
            config = impl.config({**config, **defines}) if plugin == "cuda" else impl.config(config)
            entry = {"plugin": plugin, **config}
            try:
                mismatch = outputs_match(impl.run(call, config), want)
                if mismatch:
                    entry["error"] = mismatch
                else:
                    entry["ms"] = ms(lambda impl=impl, config=config: impl.run(call, config), budget_ms)
            except (UnsupportedError, RuntimeError) as exc:  # a config that does not fit is reported
                entry["failed"] = f"{type(exc).__name__}: {str(exc)[:160]}"
            row["configs"].append(entry)
    bad = [c for c in row["configs"] if "ms" not in c]
    if bad:
        print(f"  {op} {row['shape']}: {len(bad)} configs failed or wrong, first: {bad[0]}", flush=True)
    return row


def report_line(row: dict, bandwidth: float) -> str:
    """One table row: % of the floor of each candidate, and the best configs."""
    floor = row["bytes"] / bandwidth
    best = {}
    for plugin in ("cuda", "triton"):
        timed = [c for c in row["configs"] if c["plugin"] == plugin and "ms" in c]
        best[plugin] = min(timed, key=lambda c: c["ms"]) if timed else None
    default = next((c for c in row["configs"] if c["plugin"] == "cuda" and "ms" in c), None)  # the first: default
    pct = [f"{100 * floor / c['ms']:.0f}%" if c else "-" for c in (default, best["cuda"], best["triton"])]
    configs = [", ".join(f"{k}={v}" for k, v in c.items() if k not in ("plugin", "ms")) if c else "-"
               for c in (best["cuda"], best["triton"])]
    return (f"| {row['op']} | {row['shape']} | {floor:.4f} | {100 * floor / row['copy']:.0f}% "
            f"| {100 * floor / row['torch']:.0f}% | {100 * floor / row['dispatch']:.0f}% | {' | '.join(pct)} "
            f"| {' | '.join(configs)} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dtype", default="float32")
    parser.add_argument("--op", action="append", choices=["layer_norm", "layer_norm_backward"])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--shape", action="append", help="only these shapes, e.g. 1024x65536 (repeatable)")
    parser.add_argument("--budget-ms", type=float, default=20.0)
    parser.add_argument("--out", type=Path, default=Path("."))
    parser.add_argument("--plugin", action="append", choices=["cuda", "triton"], help="only these plugins' configs")
    parser.add_argument("--define", action="append", default=[], metavar="NAME=VALUE",
                        help="a define added to every cuda config (an A/B of a source switch; repeatable)")
    parser.add_argument("--plain-launch", action="store_true",
                        help="the backward's second kernel launched after the row kernel ends, not as its programmatic "
                             "dependent (the A/B of that launch)")
    args = parser.parse_args()
    if args.plain_launch:
        registry.impl("layer_norm_backward", "cuda").dependent_launch = False
    dtype = getattr(torch, args.dtype)
    defines = {name: int(value) for name, value in (d.split("=", 1) for d in args.define)}
    bandwidth = copy_bandwidth(args.budget_ms)
    print(f"{torch.cuda.get_device_name()}: 1 GiB copy {bandwidth / 1e6:.0f} GB/s", flush=True)
    results = []
    for op in args.op or ["layer_norm", "layer_norm_backward"]:
        for shape in registry.op(op).shapes["cuda"]:
            if args.shape and "x".join(map(str, shape)) not in args.shape:
                continue
            plugins = args.plugin or ["cuda", "triton"]
            results.append(sweep(op, shape, dtype, args.quick, args.budget_ms, defines, plugins))
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "layer_norm_sweep.json").write_text(json.dumps({"bandwidth": bandwidth, "rows": results}, indent=1))
    print("\n% of the floor (op bytes over the 1 GiB copy's bandwidth); best config per plugin\n")
    print("| op | shape | floor ms | same-bytes copy | torch | dispatch | cuda default | cuda best | triton best "
          "| best cuda config | best triton config |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|---|---|")
    for row in results:
        print(report_line(row, bandwidth))


if __name__ == "__main__":
    main()
