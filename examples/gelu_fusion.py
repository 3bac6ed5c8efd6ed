"""The kernel-fusion study: GELU (tanh form) written as separate torch ops, torch's fused GELU, torch.compile of
the separate ops, and kernelzoo's plugins, each against the floor: the bytes of one pass over bandwidth.

    python examples/gelu_fusion.py [--device cuda|cpu] [--out fragment.md] [--no-compile]

Written out, GELU is 9 elementwise torch ops; each reads its inputs from memory and writes its result
back, so the tensor crosses the memory bus ~20 times instead of twice, and on a GPU the separate ops take
about ten times the fused kernel's time (docs/design/elementwise.md). A fused kernel does the arithmetic while
the data streams by; memory bandwidth is all it costs.
A table for the GPU size when there is a GPU, and one for a CPU size always.
"""

from __future__ import annotations

import argparse
import math
import os
import platform
import shlex
import sys
from collections.abc import Callable
from datetime import date
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

import kernelzoo
from kernelzoo.backends.triton import version as triton_version
from kernelzoo.bench.cases import Case, plugin_config, why_not
from kernelzoo.calibrate import ceilings_here
from kernelzoo.fingerprint import fingerprint
from kernelzoo.registry import registry
from kernelzoo.table import format_markdown, format_table
from kernelzoo.timing import time_fn

SQRT_2_OVER_PI = math.sqrt(2.0 / math.pi)
PLUGINS = ("cuda", "triton", "openmp", "python")
HEADERS = ("variant", "ms", "GB/s", "% of floor", "vs fused torch")


def gelu_separate(x: torch.Tensor) -> torch.Tensor:
    """GELU as a user writes it: 9 ops (x·x, ·x, 0.044715·, x+, √(2/π)·, tanh, 1+, 0.5·x, ·), a kernel each."""
    return 0.5 * x * (1.0 + torch.tanh(SQRT_2_OVER_PI * (x + 0.044715 * x * x * x)))


def variants(x: torch.Tensor, compile_: bool) -> list[tuple[str, Callable[[], Any] | str]]:
    """(name, function to time, or the reason it is skipped)."""
    found: list[tuple[str, Callable[[], Any] | str]] = [
        ("torch, separate ops", lambda: gelu_separate(x)),
        ("torch fused: F.gelu(approximate='tanh')", lambda: F.gelu(x, approximate="tanh")),
    ]
    if not compile_:
        found.append(("torch.compile of the separate ops", "skipped: --no-compile"))
    else:
        try:  # compiles on the first call: ~25 s on 2 CPU cores
            compiled = torch.compile(gelu_separate)
            compiled(x)
            found.append(("torch.compile of the separate ops", lambda: compiled(x)))
        except Exception as exc:  # no C++ compiler, no Triton, an unsupported platform
            found.append(("torch.compile of the separate ops", f"skipped: {type(exc).__name__}: {exc}"[:200]))
    shape = tuple(x.shape)
    for plugin in PLUGINS:
        case = Case("gelu", plugin, "float32", shape, (("approximate", "tanh"),))
        why = why_not(case, x.device)
        if why is not None:
            found.append((f"kernelzoo {plugin}", f"skipped: {why}"))
            continue
        impl, call = registry.impl("gelu", plugin), registry.op("gelu").check(x, approximate="tanh")
        config, _ = plugin_config(registry.op("gelu"), impl, call)
        found.append((f"kernelzoo {plugin}", lambda impl=impl, call=call, config=config: impl.run(call, config)))
    chosen = kernelzoo.explain("gelu", x, approximate="tanh").plugin
    found.append((f"kernelzoo.ops.gelu (runs {chosen})", lambda: kernelzoo.ops.gelu(x, approximate="tanh")))
    return found


def study(device: torch.device, shape: tuple[int, int], compile_: bool) -> tuple[str, list[list[str]], list[str]]:
    """(title, table rows, notes: the floor's and why variants were skipped) of one device and size."""
    x = torch.randn(shape, generator=torch.Generator().manual_seed(0)).to(device)
    nbytes = 2 * x.numel() * x.element_size()  # read x once, write y once
    ceilings = ceilings_here(device)
    floor_ms = ceilings.floor_ms(0.0, nbytes, "float32") if ceilings is not None else None
    timed: list[tuple[str, float | str]] = []
    for name, fn in variants(x, compile_):
        if isinstance(fn, str):
            timed.append((name, fn))
            continue
        print(f"timing {name} on {device.type}", file=sys.stderr)
        timed.append((name, time_fn(fn, device, budget_ms=300).median_ms))
    fused = next(ms for name, ms in timed if name.startswith("torch fused"))
    rows, skipped = [], []
    for name, ms in timed:
        if isinstance(ms, str):
            rows.append([f"{name} (skipped)", "-", "-", "-", "-"])
            skipped.append(f"{name}: {ms.removeprefix('skipped: ')}")
            continue
        rows.append([name, f"{ms:.4g}", f"{nbytes / ms / 1e6:.4g}",
                     f"{100 * floor_ms / ms:.0f}%" if floor_ms else "-", f"{fused / ms:.2f}x"])
    if floor_ms:
        rows.append(["floor: bytes / bandwidth", f"{floor_ms:.4g}", f"{ceilings.bandwidth_gbs:.4g}", "100%",
                     f"{fused / floor_ms:.2f}x"])
    title = f"{fingerprint(device).describe()}: gelu (tanh) of {shape[0]}x{shape[1]} float32"
    note = (f"floor = {nbytes / 2**30:.3g} GiB read + written / {ceilings.bandwidth_gbs:.4g} GB/s ({ceilings.source})"
            if ceilings is not None else "no ceilings: no floor")
    return title, rows, [note, *skipped]


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--gpu-size", default="16384x16384", help="GPU problem, rows x cols (default 16384x16384)")
    p.add_argument("--cpu-size", default="4096x4096", help="CPU problem (default 4096x4096: 64 MB, past the L3)")
    p.add_argument("--device", action="append", choices=("cuda", "cpu"), help="only this device (repeatable; "
                   "default: cuda if there is a GPU, and cpu)")
    p.add_argument("--no-compile", action="store_true", help="leave torch.compile out (~25 s on 2 CPU cores)")
    p.add_argument("--out", type=Path, help="also write the tables as a markdown fragment here")
    args = p.parse_args(argv)
    devices = args.device or (["cuda"] if torch.cuda.is_available() else []) + ["cpu"]
    runs = [(torch.device(d), args.gpu_size if d == "cuda" else args.cpu_size) for d in devices]
    sections = []
    for device, size in runs:
        rows_, cols = (int(n) for n in size.lower().split("x"))
        title, rows, notes = study(device, (rows_, cols), not args.no_compile)
        print(format_table(HEADERS, rows, title=title) + "\n" + "\n".join(notes) + "\n", flush=True)
        bullets = "\n".join(f"- {n}" for n in notes)
        sections.append(f"#### {title}\n\n{format_markdown(HEADERS, rows)}\n\n{bullets}\n")
    if args.out:
        command = shlex.join(["python", "examples/gelu_fusion.py", *(sys.argv[1:] if argv is None else argv)])
        load = f", load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs" if hasattr(os, "getloadavg") else ""
        header = (f"Measured {date.today().isoformat()} with `{command}`{load}; python {platform.python_version()}, "
                  f"torch {torch.__version__}, triton {triton_version()}. "
                  "Median of CUDA-event (GPU, L2 flushed) or perf_counter (CPU) timings; 'vs fused torch' is the "
                  "fused op's time over the variant's (above 1: faster).\n")
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(header + "\n" + "\n".join(sections))


if __name__ == "__main__":
    main()
