"""Attention forward and backward on the GPU: kernelzoo's plugins against torch's SDPA backends
(FlashAttention-2, cuDNN, memory-efficient), per shape, in one run.

    python scripts/attention_bench.py [--out DIR] [--quick] [--fp8 | --fp8-only] [--winners tuning_db/h200.json]

Shapes: float16, D 64 and 128, causal and not, N 1024 / 4096 / 16384 with B=4, H=32,
and N=16384 with B=1. Every candidate is checked against torch's FLASH backend on the same inputs before it is
timed (a wrong kernel is reported, not timed). Times are medians of CUDA events with the L2 flushed
(kernelzoo.timing), the candidates of a shape timed in turn over --rounds interleaved rounds, each in its own
shuffled order (so that a change of the GPU's clocks meets every candidate alike), and the median of the
rounds' medians kept; TFLOP/s count the op's FLOPs (forward 4·B·H·N²·D, halved when causal; backward 2.5× the
forward). The triton and cuda columns run each plugin's default config, or with --winners (a `kernelzoo db
export` file) the config that file stores for the key, where it has one. Writes attention_bench.json, a
markdown table (with the speed targets met, and the tuned dispatch against the fastest candidate) and a plot
(attention_bench.png) under --out, and prints the tables.

--fp8 adds, per shape, the forward on float8_e4m3fn q, k, v (amax-quantized per kv head): the triton plugin with
P·V in FP8 and in float16 (PV_FP8 1 and 0), the cuda plugin (the stored config with --winners), each
with the op's own verdict against the float64 reference of the dequantized inputs (skipped past 4·32·4096² scores,
where that reference takes minutes), and the dispatched call, against cuDNN's float16 forward of the same shape
(--fp8-only: those rows alone).

--wall adds the wall time of 200 calls in a row at (4, 32, 1024, 64), forward and forward + backward through
autograd, host time included, the dispatched call against cuDNN's (--wall-only: those rows alone).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

import torch
from torch.nn.attention import SDPBackend, sdpa_kernel

from kernelzoo import dispatch, ops
from kernelzoo.db.lookup import WAIT_ENV
from kernelzoo.registry import registry
from kernelzoo.timing import time_rounds

BACKENDS = {"flash": SDPBackend.FLASH_ATTENTION, "cudnn": SDPBackend.CUDNN_ATTENTION,
            "efficient": SDPBackend.EFFICIENT_ATTENTION}


def shapes(quick: bool) -> list[tuple[int, int, int, int, bool]]:
    sizes = [(4, 1024), (4, 4096)] if quick else [(4, 1024), (4, 4096), (4, 16384), (1, 16384)]
    return [(b, 32, n, d, causal) for d in (64, 128) for b, n in sizes for causal in (False, True)]


def sdpa(backend: SDPBackend, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool) -> torch.Tensor:
    with sdpa_kernel([backend]):
        return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal)


def close(a: torch.Tensor, b: torch.Tensor) -> float:
    """Largest error relative to b's largest magnitude."""
    a, b = a.detach().float(), b.detach().float()
    return float((a - b).abs().max() / b.abs().max().clamp_min(1e-6))


def stored_configs(path: str | None) -> dict[tuple, dict]:
    """(op, plugin, dtype, shape, flags) -> config of every record of a winners export (empty without one)."""
    if path is None:
        return {}
    records = json.loads(Path(path).read_text())["records"]
    here = torch.cuda.get_device_name()
    return {(r["op"], r["plugin"], r["dtype"], r["shape"], r["flags"]): r["config"] for r in records
            if r["device"]["name"] == here}


def bench_shape(b: int, h: int, n: int, d: int, causal: bool, budget_ms: float, rounds: int,
                stored: dict[tuple, dict]) -> dict:
    g = torch.Generator(device="cuda").manual_seed(n * d + causal)
    q, k, v, do = (torch.randn((b, h, n, d), device="cuda", dtype=torch.float16, generator=g) for _ in range(4))
    fwd_spec, bwd_spec = registry.op("attention"), registry.op("attention_backward")
    fwd_call = fwd_spec.check(q, k, v, causal=causal)
    flops = fwd_spec.flops(fwd_call)
    row: dict = {"shape": f"{b}x{h}x{n}x{d}", "causal": causal, "fwd": {}, "bwd": {}, "errors": {}, "rounds": {}}
    timed: dict[tuple[str, str], Callable[[], object]] = {}

    # reference output and gradients from the FLASH backend
    qr, kr, vr = (t.clone().requires_grad_() for t in (q, k, v))
    o_ref = sdpa(SDPBackend.FLASH_ATTENTION, qr, kr, vr, causal)
    grads_ref = torch.autograd.grad(o_ref, (qr, kr, vr), do)

    def record(kind: str, name: str, fn, out: torch.Tensor | tuple, ref: torch.Tensor | tuple) -> None:
        outs = out if isinstance(out, tuple) else (out,)
        refs = ref if isinstance(ref, tuple) else (ref,)
        error = max(close(a, r) for a, r in zip(outs, refs))
        row["errors"][f"{kind}/{name}"] = error
        row[kind][name] = None
        if error <= 2e-2:
            timed[kind, name] = fn

    for name, backend in BACKENDS.items():
        try:
            record("fwd", name, lambda be=backend: sdpa(be, q, k, v, causal), sdpa(backend, q, k, v, causal), o_ref)
            qb, kb, vb = (t.clone().requires_grad_() for t in (q, k, v))
            ob = sdpa(backend, qb, kb, vb, causal)
            record("bwd", name, lambda ob=ob, qb=qb, kb=kb, vb=vb: torch.autograd.grad(ob, (qb, kb, vb), do,
                                                                                       retain_graph=True),
                   torch.autograd.grad(ob, (qb, kb, vb), do, retain_graph=True), grads_ref)
        except RuntimeError as exc:  # a backend that refuses the shape
            row["errors"][f"fwd/{name}"] = f"unavailable: {str(exc).splitlines()[0][:80]}"

    for impl in registry.implementations("attention"):
        if impl.plugin not in ("triton", "cuda") or not registry.availability(impl) or impl.supports(fwd_call):
            continue
        key = (b, h, n, d, causal)
        config = impl.config(stored.get(("attention", impl.plugin, "float16", *key_text(key))))
        row.setdefault("configs", {})[f"fwd/{impl.plugin}"] = config
        o, lse = impl.run(fwd_call, config)
        record("fwd", impl.plugin, lambda impl=impl, c=config: impl.run(fwd_call, c), o, o_ref)
        bwd_impl = registry.impl("attention_backward", impl.plugin)
        bwd_call = bwd_spec.check(q, k, v, o, lse, do, causal=causal)
        if registry.availability(bwd_impl) and not bwd_impl.supports(bwd_call):
            bc = bwd_impl.config(stored.get(("attention_backward", impl.plugin, "float16", *key_text(key))))
            row["configs"][f"bwd/{impl.plugin}"] = bc
            record("bwd", impl.plugin, lambda i=bwd_impl, c=bc, call=bwd_call: i.run(call, c),
                   tuple(bwd_impl.run(bwd_call, bc)), grads_ref)

    o, lse = dispatch.run_op("attention", q, k, v, causal=causal)
    record("fwd", "dispatch", lambda: ops.attention(q, k, v, causal=causal), o, o_ref)
    record("bwd", "dispatch", lambda: ops.attention_backward(q, k, v, o, lse, do, causal=causal),
           tuple(ops.attention_backward(q, k, v, o, lse, do, causal=causal)), grads_ref)
    row["dispatch_choice"] = {"fwd": dispatch.explain("attention", q, k, v, causal=causal).plugin,
                              "bwd": dispatch.explain("attention_backward", q, k, v, o, lse, do, causal=causal).plugin}
    times = time_rounds(timed, "cuda", rounds=rounds, budget_ms=budget_ms, warmup=2, min_repeats=3)
    for (kind, name), t in times.items():
        row["rounds"][f"{kind}/{name}"] = t
        row[kind][name] = statistics.median(t)
    row["fwd_tflops"] = {k: flops / (t * 1e-3) / 1e12 for k, t in row["fwd"].items() if t}
    row["bwd_tflops"] = {k: 2.5 * flops / (t * 1e-3) / 1e12 for k, t in row["bwd"].items() if t}
    return row


VERIFY_LIMIT = 4 * 32 * 4096 * 4096  # scores past which the FP8 rows are not checked against float64


def bench_fp8(b: int, h: int, n: int, d: int, causal: bool, budget_ms: float, rounds: int,
              stored: dict[tuple, dict]) -> dict:
    """The FP8 forward of one shape (e4m3, descales per kv head) against cuDNN's float16 forward."""
    from kernelzoo_plugins._flash.fp8 import quantized_inputs

    g = torch.Generator(device="cuda").manual_seed(n * d + causal)
    x = [torch.randn((b, h, n, d), device="cuda", generator=g) for _ in range(3)]
    half = [t.half() for t in x]
    (q, k, v), descales = quantized_inputs(*x, torch.float8_e4m3fn, "head")
    spec, impl = registry.op("attention"), registry.impl("attention", "triton")
    call = spec.check(q, k, v, causal=causal, **descales)
    row: dict = {"shape": f"{b}x{h}x{n}x{d}", "causal": causal, "verdicts": {}, "configs": {}}
    timed: dict[str, Callable[[], object]] = {"cudnn fp16": lambda: sdpa(SDPBackend.CUDNN_ATTENTION, *half, causal)}
    reference = spec.reference(call) if b * h * n * n <= VERIFY_LIMIT else None
    candidates = [(f"triton PV_FP8={pv}", impl, impl.config({"PV_FP8": pv})) for pv in (0, 1)]
    cuda = registry.impl("attention", "cuda")
    if registry.availability(cuda) and not cuda.supports(call):
        stored_config = stored.get(("attention", "cuda", "float8_e4m3fn", *key_text((b, h, n, d, causal))))
        candidates.append(("cuda", cuda, cuda.config(stored_config)))
    for name, plugin, config in candidates:
        row["configs"][name] = config
        timed[name] = lambda p=plugin, c=config: p.run(call, c)
        if reference is not None:
            why = spec.verify(call, plugin.run(call, config), reference)
            row["verdicts"][name] = "meets the tolerance" if why is None else f"misses it: {why.what[:90]}"
    timed["dispatch"] = lambda: ops.attention(q, k, v, causal=causal, **descales)
    row["dispatch_choice"] = dispatch.explain("attention", q, k, v, causal=causal, **descales).plugin
    flops = spec.flops(call)
    times = time_rounds(timed, "cuda", rounds=rounds, budget_ms=budget_ms, warmup=2, min_repeats=3)
    row["tflops"] = {name: flops / (statistics.median(t) * 1e-3) / 1e12 for name, t in times.items()}
    return row


WALL_SHAPE = (4, 32, 1024, 64, False)  # small enough that a call's host time could show in its wall time
WALL_LIMIT = 1.1  # the dispatched call's wall time against cuDNN's, at most


def bench_wall(b: int, h: int, n: int, d: int, causal: bool, calls: int, rounds: int) -> dict:
    """Wall time of one call as a training step sees it, forward and forward + backward through autograd:
    ``calls`` calls in a row ended by one synchronisation (host and GPU time overlapping as they do in a model),
    the median over ``rounds`` rounds taken in turns, kernelzoo's dispatched call against cuDNN's."""
    g = torch.Generator(device="cuda").manual_seed(n * d + causal)
    q, k, v, do = (torch.randn((b, h, n, d), device="cuda", dtype=torch.float16, generator=g) for _ in range(4))
    qg, kg, vg = (t.clone().requires_grad_() for t in (q, k, v))

    def cudnn_step() -> None:
        sdpa(SDPBackend.CUDNN_ATTENTION, qg, kg, vg, causal).backward(do)

    def kernelzoo_step() -> None:
        ops.attention(qg, kg, vg, causal=causal).backward(do)

    steps = {("fwd", "cudnn"): lambda: sdpa(SDPBackend.CUDNN_ATTENTION, q, k, v, causal),
             ("fwd", "dispatch"): lambda: ops.attention(q, k, v, causal=causal),
             ("fwd+bwd", "cudnn"): cudnn_step, ("fwd+bwd", "dispatch"): kernelzoo_step}
    per_call: dict[tuple[str, str], list[float]] = {key: [] for key in steps}
    for fn in steps.values():  # compile, tune-cache and warm every path first
        for _ in range(3):
            fn()
    torch.cuda.synchronize()
    for _ in range(rounds):
        for key, fn in steps.items():
            start = time.perf_counter()
            for _ in range(calls):
                fn()
            torch.cuda.synchronize()
            per_call[key].append((time.perf_counter() - start) / calls * 1e6)
    us = {f"{kind}/{name}": statistics.median(t) for (kind, name), t in per_call.items()}
    return {"shape": f"{b}x{h}x{n}x{d}", "causal": causal, "us": us, "calls": calls, "rounds": rounds,
            "choice": {"fwd": dispatch.explain("attention", q, k, v, causal=causal).plugin}}


def wall_table(row: dict) -> str:
    lines = ["| shape B×H×N×D | causal | pass | cuDNN µs | dispatch µs | dispatch / cuDNN | ≤ "
             f"{WALL_LIMIT}× |", "|---|---|---|---:|---:|---:|---|"]
    for kind in ("fwd", "fwd+bwd"):
        cudnn, ours = row["us"][f"{kind}/cudnn"], row["us"][f"{kind}/dispatch"]
        lines.append(f"| {row['shape']} | {'yes' if row['causal'] else 'no'} | {kind} | {cudnn:.1f} | {ours:.1f} | "
                     f"{ours / cudnn:.3f}× | {'yes' if ours / cudnn <= WALL_LIMIT else 'no'} |")
    return "\n".join(lines)


def fp8_table(rows: list[dict]) -> str:
    names = ["cudnn fp16", "triton PV_FP8=0", "triton PV_FP8=1", "cuda", "dispatch"]
    lines = ["| shape B×H×N×D | causal | " + " | ".join(names) + " | PV_FP8=0 / cuDNN | cuda / cuDNN | cuda verdict "
             "| PV_FP8=1 verdict |", "|---|---|" + "---:|" * len(names) + "---:|---:|---|---|"]
    for r in rows:
        tf = r["tflops"]
        cells = [f"{tf[name]:.0f}" if tf.get(name) else "–" for name in names]
        cells[-1] += f" ({r['dispatch_choice']})"
        ratios = [f"{tf[name] / tf['cudnn fp16']:.2f}×" if tf.get(name) else "–"
                  for name in ("triton PV_FP8=0", "cuda")]
        verdicts = [r["verdicts"].get(name, "not checked" if name in r["configs"] else "–")
                    for name in ("cuda", "triton PV_FP8=1")]
        lines.append(f"| {r['shape']} | {'yes' if r['causal'] else 'no'} | " + " | ".join(cells + ratios + verdicts)
                     + " |")
    return "\n".join(lines)


def key_text(key: tuple[int, int, int, int, bool]) -> tuple[str, str]:
    """The shape and flags texts under which the tuner stores a (B, H, N, D, causal) key."""
    b, h, n, d, causal = key
    return f"{b}x{h}x{n}x{d}", "causal" if causal else ""


def table(rows: list[dict]) -> str:
    names = ["flash", "cudnn", "efficient", "triton", "cuda", "dispatch"]
    head = "| shape B×H×N×D | causal | pass | " + " | ".join(names) + " | triton/flash | triton/cudnn | cuda/flash |"
    lines = [head, "|" + "---|" * (head.count("|") - 1)]
    for row in rows:
        for kind in ("fwd", "bwd"):
            tf = row[f"{kind}_tflops"]

            def ratio(a: str, b: str, tf: dict = tf) -> str:
                return f"{tf[a] / tf[b]:.2f}×" if tf.get(a) and tf.get(b) else "–"
            cells = [f"{tf[n]:.0f}" if tf.get(n) else "–" for n in names]
            lines.append(f"| {row['shape']} | {'yes' if row['causal'] else 'no'} | {kind} | " + " | ".join(cells)
                         + f" | {ratio('triton', 'flash')} | {ratio('triton', 'cudnn')} | {ratio('cuda', 'flash')} |")
    return "\n".join(lines)


# The speed targets against SDPA's backends: (what, pass, plugin, against, at least, from N)
TARGETS = [("dispatch forward ≥ 1.05× cuDNN, N ≥ 4096", "fwd", "dispatch", "cudnn", 1.05, 4096),
           ("dispatch backward ≥ 1.0× cuDNN, N ≥ 4096", "bwd", "dispatch", "cudnn", 1.0, 4096),
           ("Triton forward ≥ 1.0× FA2", "fwd", "triton", "flash", 1.0, 0),
           ("Triton backward ≥ 1.0× FA2", "bwd", "triton", "flash", 1.0, 0),
           ("cuda forward ≥ 1.0× FA2", "fwd", "cuda", "flash", 1.0, 0),
           ("cuda backward ≥ 1.0× FA2", "bwd", "cuda", "flash", 1.0, 0)]
CANDIDATES = {"flash": "torch", "triton": "triton", "cuda": "cuda"}  # column: the plugin dispatch names


def targets(rows: list[dict], tolerance: float = 0.03) -> str:
    """The speed targets over the rows, as a markdown table: how many rows meet each, the range of the ratio,
    and the misses; last, the tuned dispatch against the fastest of flash, triton and cuda (within tolerance),
    each miss saying whether dispatch ran that fastest candidate's plugin (then the gap is the measurement's)."""
    lines = ["| target | met | range | misses |", "|---|---|---|---|"]

    def label(row: dict, kind: str) -> str:
        return f"{row['shape']}{' causal' if row['causal'] else ''} {kind}"

    for what, kind, plugin, against, least, n_min in TARGETS:
        ratios = [(label(r, kind), r[f"{kind}_tflops"][plugin] / r[f"{kind}_tflops"][against]) for r in rows
                  if int(r["shape"].split("x")[2]) >= n_min
                  and r[f"{kind}_tflops"].get(plugin) and r[f"{kind}_tflops"].get(against)]
        if ratios:
            misses = [f"{name} {ratio:.3f}×" for name, ratio in ratios if ratio < least]
            values = [ratio for _, ratio in ratios]
            met = f"{len(ratios) - len(misses)} of {len(ratios)}"
            lines.append(f"| {what} | {met} | {min(values):.3f}–{max(values):.3f}× | {'; '.join(misses) or '–'} |")
    misses, values = [], []
    for row in rows:
        for kind in ("fwd", "bwd"):
            tf = row[f"{kind}_tflops"]
            present = [c for c in CANDIDATES if tf.get(c)]
            if not tf.get("dispatch") or not present:
                continue
            fastest = max(present, key=tf.get)
            ratio = tf["dispatch"] / tf[fastest]
            values.append(ratio)
            if ratio < 1 - tolerance:
                chose = row.get("dispatch_choice", {}).get(kind)
                why = ("ran it" if chose == CANDIDATES[fastest] else f"ran {chose}") if chose else "choice unknown"
                misses.append(f"{label(row, kind)} {ratio:.3f}× of {fastest} ({why})")
    if values:
        met = f"{len(values) - len(misses)} of {len(values)}"
        lines.append(f"| dispatch within {tolerance:.0%} of the fastest of flash, triton, cuda | {met} "
                     f"| {min(values):.3f}–{max(values):.3f}× | {'; '.join(misses) or '–'} |")
    return "\n".join(lines)


def plot(rows: list[dict], path: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(2, 1, figsize=(12, 8), sharey=True)  # one above the other: 16 readable labels each
    labels = [f"B{r['shape'].split('x')[0]} {r['shape'].split('x', 2)[2]}{' c' if r['causal'] else ''}" for r in rows]
    names = ["flash", "cudnn", "triton", "cuda"]
    for ax, kind in zip(axes, ("fwd", "bwd")):
        width = 0.8 / len(names)
        for i, name in enumerate(names):
            values = [r[f"{kind}_tflops"].get(name, 0) for r in rows]
            ax.bar([x + i * width for x in range(len(rows))], values, width, label=name)
        ax.set_xticks([x + 0.4 - width / 2 for x in range(len(rows))], labels, fontsize=8, rotation=30, ha="right")
        ax.set_title(f"attention {'forward' if kind == 'fwd' else 'backward'}, float16 (B, N×D, c = causal; H = 32)")
        ax.set_ylabel("TFLOP/s")
        ax.legend(ncols=4, fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main() -> int:
    # the dispatch column is the tuned choice: the first call of a key waits for the tuning database (its first read
    # imports the shipped winners) rather than running the default order meanwhile
    os.environ.setdefault(WAIT_ENV, "60000")
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=".")
    parser.add_argument("--quick", action="store_true", help="N 1024 and 4096 only")
    parser.add_argument("--budget-ms", type=float, default=60.0, help="timing budget of one candidate in a round")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--winners", help="a winners export whose configs the triton and cuda columns run")
    parser.add_argument("--fp8", action="store_true", help="also the FP8 forward per shape")
    parser.add_argument("--fp8-only", action="store_true", help="only the FP8 rows")
    parser.add_argument("--wall", action="store_true",
                        help="also the wall time of calls in a row at B=4, H=32, N=1024, D=64 (host time included)")
    parser.add_argument("--wall-only", action="store_true", help="only the wall-time rows")
    args = parser.parse_args()
    stored = stored_configs(args.winners)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    rows = []
    wall = bench_wall(*WALL_SHAPE, calls=200, rounds=max(args.rounds, 5)) if args.wall or args.wall_only else None
    if args.wall_only:
        print(wall_table(wall))
        return 0
    for shape in shapes(args.quick) if not args.fp8_only else ():
        rows.append(bench_shape(*shape, budget_ms=args.budget_ms, rounds=args.rounds,
                                stored=stored))
        print(json.dumps({k: rows[-1][k] for k in ("shape", "causal", "fwd_tflops", "bwd_tflops")}), flush=True)
    fp8 = []
    for shape in shapes(args.quick) if args.fp8 or args.fp8_only else ():
        fp8.append(bench_fp8(*shape, budget_ms=args.budget_ms, rounds=args.rounds, stored=stored))
        print(json.dumps({k: fp8[-1][k] for k in ("shape", "causal", "tflops")}), flush=True)
    meta = {"device": torch.cuda.get_device_name(), "torch": torch.__version__,
            "triton": __import__("triton").__version__, "python": platform.python_version(),
            "date": time.strftime("%Y-%m-%d"), "seconds": round(time.perf_counter() - start, 1),
            "configs": f"stored in {args.winners}, else defaults" if args.winners else "defaults",
            "rounds": args.rounds, "budget_ms": args.budget_ms}
    (out / "attention_bench.json").write_text(json.dumps({"meta": meta, "rows": rows, "fp8": fp8, "wall": wall},
                                                         indent=1))
    text = "\n\n".join(part for part in (table(rows) + "\n\n" + targets(rows) if rows else "",
                                          fp8_table(fp8) if fp8 else "", wall_table(wall) if wall else "") if part)
    (out / "attention_bench.md").write_text(text + "\n")
    if rows:
        plot(rows, out / "attention_bench.png")
    print(json.dumps(meta))
    print(text)
    wrong = {k: v for r in rows for k, v in r["errors"].items() if isinstance(v, float) and v > 2e-2}
    if wrong:
        print(f"MISMATCHES: {wrong}", file=sys.stderr)
    return 1 if wrong else 0


if __name__ == "__main__":
    sys.exit(main())
