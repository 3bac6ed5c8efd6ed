"""matmul on the GPU: kernelzoo's plugins and its dispatch against cuBLAS (torch.matmul), per shape, in one run.

    python scripts/matmul_bench.py [--out DIR] [--quick] [--winners tuning_db/h200.json] [--rounds 5]

Shapes: bf16 and fp16 at 4096³, 8192³, the tall 16384×1024×4096 and the unaligned 4095×4097×4096 (its rows of
4097 elements are not 16-byte aligned, which cuBLAS's fast kernels and TMA need), float32 at 4096³ in IEEE
float32, and float32 with TF32 allowed (``torch.backends.cuda.matmul.allow_tf32``) at 4096³, 8192³ and the tall
shape. Every candidate is checked against a float64 product of the same inputs before it is timed (a wrong result
is reported, not timed). Times are medians of CUDA events with the L2 flushed (kernelzoo.timing), the candidates of
a shape timed in turn over --rounds interleaved rounds, each in its own shuffled order, and the median of the
rounds' medians kept. The triton and cuda columns run the config the --winners file stores for the key (the
plugin's default without one); dispatch is ``kernelzoo.ops.matmul`` on the installed database. Writes
matmul_bench.json, matmul_bench.md and a plot (matmul_bench.png) under --out and prints the table.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
from collections.abc import Callable
from pathlib import Path

import torch

from kernelzoo import dispatch, ops
from kernelzoo.db.lookup import WAIT_ENV
from kernelzoo.errors import UnsupportedError
from kernelzoo.registry import registry
from kernelzoo.timing import time_rounds

DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32, "tf32": torch.float32}
PLUGINS = ("triton", "cuda")


def shapes(quick: bool) -> list[tuple[str, int, int, int]]:
    full = [("bf16", 4096, 4096, 4096), ("bf16", 8192, 8192, 8192), ("bf16", 16384, 1024, 4096),
            ("bf16", 4095, 4097, 4096), ("fp16", 4096, 4096, 4096), ("fp16", 8192, 8192, 8192),
            ("fp16", 16384, 1024, 4096), ("fp16", 4095, 4097, 4096), ("fp32", 4096, 4096, 4096),
            ("tf32", 4096, 4096, 4096), ("tf32", 8192, 8192, 8192), ("tf32", 16384, 1024, 4096)]
    return full[:2] + full[3:4] if quick else full


def stored_configs(path: str | None) -> dict[tuple, dict]:
    """(plugin, dtype, shape, flags) -> config of every matmul record of a winners file for this GPU."""
    if path is None:
        return {}
    here = torch.cuda.get_device_name()
    return {(r["plugin"], r["dtype"], r["shape"], r["flags"]): r["config"]
            for r in json.loads(Path(path).read_text())["records"]
            if r["op"] == "matmul" and r["device"]["name"] == here}


def bench_shape(kind: str, m: int, n: int, k: int, stored: dict[tuple, dict], rounds: int, budget_ms: float) -> dict:
    torch.backends.cuda.matmul.allow_tf32 = kind == "tf32"
    try:
        g = torch.Generator(device="cuda").manual_seed(m + n + k)
        a = torch.randn((m, k), device="cuda", dtype=DTYPES[kind], generator=g)
        b = torch.randn((k, n), device="cuda", dtype=DTYPES[kind], generator=g)
        op = registry.op("matmul")
        call = op.check(a, b)
        want = op.reference(call)
        row: dict = {"dtype": kind, "shape": f"{m}x{n}x{k}", "flags": op.flags(call), "errors": {}, "configs": {},
                     "ms": {}, "tflops": {}}
        timed: dict[str, Callable[[], object]] = {}

        def check(name: str, fn: Callable[[], torch.Tensor]) -> None:
            try:
                out = fn()
            except UnsupportedError as exc:  # a config this dtype does not fit
                row["errors"][name] = f"unsupported: {exc}"
                return
            mismatch = op.verify(call, out, want)
            row["errors"][name] = float((out.double() - want).abs().max() / want.abs().max())
            if mismatch is None:
                timed[name] = fn
            else:
                row["errors"][name] = f"wrong: {mismatch}"

        check("torch", lambda: a @ b)
        for plugin in PLUGINS:
            impl = registry.impl("matmul", plugin)
            if not registry.availability(impl) or impl.supports(call):
                continue
            config = impl.config(stored.get((plugin, str(call.dtype).removeprefix("torch."), op.shape_string(call),
                                             row["flags"])))
            row["configs"][plugin] = config
            check(plugin, lambda impl=impl, config=config: impl.run(call, config))
        row["dispatch_choice"] = dispatch.explain("matmul", a, b).plugin
        check("dispatch", lambda: ops.matmul(a, b))
        times = time_rounds(timed, "cuda", rounds=rounds, budget_ms=budget_ms, warmup=2, min_repeats=3)
        for name, t in times.items():
            row["ms"][name] = statistics.median(t)
            row["tflops"][name] = op.flops(call) / (row["ms"][name] * 1e-3) / 1e12
        return row
    finally:
        torch.backends.cuda.matmul.allow_tf32 = False


def table(rows: list[dict]) -> str:
    head = ("| dtype | M×N×K | cuBLAS (torch) | triton | cuda | dispatch (plugin) | triton/cuBLAS | cuda/cuBLAS | "
            "dispatch/fastest |\n|---|---|---:|---:|---:|---:|---:|---:|---:|")
    lines = [head]
    for r in rows:
        t = r["tflops"]

        def cell(name: str, t: dict = t) -> str:
            return f"{t[name]:.0f}" if name in t else "—"

        def ratio(name: str, t: dict = t) -> str:
            return f"{t[name] / t['torch']:.2f}×" if name in t and "torch" in t else "—"

        fastest = max((v for key, v in t.items() if key != "dispatch"), default=0.0)
        share = f"{t['dispatch'] / fastest:.2f}" if "dispatch" in t and fastest else "—"
        lines.append(f"| {r['dtype']} | {r['shape']} | {cell('torch')} | {cell('triton')} | {cell('cuda')} | "
                     f"{cell('dispatch')} ({r['dispatch_choice']}) | {ratio('triton')} | {ratio('cuda')} | {share} |")
    return "\n".join(lines)


def plot(rows: list[dict], path: Path, device: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    labels = [f"{r['dtype']}\n{r['shape']}" for r in rows]
    fig, ax = plt.subplots(figsize=(max(8, 1.1 * len(rows)), 4.5))
    width = 0.2
    for i, name in enumerate(("torch", "triton", "cuda", "dispatch")):
        values = [r["tflops"].get(name, 0.0) for r in rows]
        ax.bar([x + (i - 1.5) * width for x in range(len(rows))], values, width,
               label="cuBLAS (torch)" if name == "torch" else name)
    ax.set_xticks(range(len(rows)), labels, fontsize=7)
    ax.set_ylabel("TFLOP/s")
    ax.set_title(f"matmul on {device}")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main(argv: list[str] | None = None) -> int:
    # the dispatch column is the tuned choice: the first call of a key waits for the tuning database (its first read
    # imports the shipped winners) rather than running the default order meanwhile
    os.environ.setdefault(WAIT_ENV, "60000")
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("."))
    parser.add_argument("--quick", action="store_true", help="three shapes")
    parser.add_argument("--winners", help="a shipped winners file whose configs the plugin columns run")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--budget-ms", type=float, default=60.0, help="timed runs per candidate and round")
    args = parser.parse_args(argv)
    if not torch.cuda.is_available():
        parser.error("needs a CUDA GPU")
    stored = stored_configs(args.winners)
    rows = []
    for kind, m, n, k in shapes(args.quick):
        rows.append(bench_shape(kind, m, n, k, stored, args.rounds, args.budget_ms))
        print(json.dumps({key: rows[-1][key] for key in ("dtype", "shape", "tflops", "dispatch_choice")}),
              flush=True)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "matmul_bench.json").write_text(json.dumps(rows, indent=1))
    text = table(rows)
    (args.out / "matmul_bench.md").write_text(text + "\n")
    plot(rows, args.out / "matmul_bench.png", torch.cuda.get_device_name())
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
