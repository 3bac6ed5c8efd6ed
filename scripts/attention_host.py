"""Host time of the Triton attention plugins' calls at N = 1024 on a GPU: Triton's own launch path
against kernelzoo's Launcher, the benchmark's timing of each (L2 flushed, host not hidden) and the GPU
time alone; the cuda and torch plugins beside them.

    python scripts/attention_host.py [--profile [--top 15]]

Host time is the median of five runs of 100 calls while the GPU sleeps, so that no call waits for it.
--profile instead runs the Triton forward and backward (dQ pass) of each shape under cProfile, 200 calls
each with the GPU kept busy, and prints the functions that took the most host time of their own (µs a call;
the profiler's own cost inflates the Python functions' share, not a C function's such as Triton's compiled
launcher).
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path

import torch

import kernelzoo.backends.triton as backend
from kernelzoo.registry import registry
from kernelzoo.timing import time_fn

SHAPES = [(4, 32, 1024, 64, True), (4, 32, 1024, 64, False), (4, 32, 1024, 128, True), (4, 32, 1024, 128, False)]


def host_us(fn: Callable[[], object], calls: int = 100) -> float:
    fn()
    torch.cuda.synchronize()
    runs = []
    for _ in range(5):
        torch.cuda._sleep(200_000_000)  # the GPU stays busy: no launch waits for it
        start = time.perf_counter()
        for _ in range(calls):
            fn()
        runs.append((time.perf_counter() - start) / calls * 1e6)
        torch.cuda.synchronize()
    return sorted(runs)[len(runs) // 2]


def bench_us(fn: Callable[[], object], hide_host: bool = False) -> float:
    return time_fn(fn, "cuda", budget_ms=100, warmup=3, hide_host=hide_host).median_ms * 1e3


def through_triton(self: backend.Launcher, grid: tuple[int, ...], *args: object, **kwargs: object) -> None:
    """Triton's own path, for comparison: every call binds and specializes its arguments."""
    self.kernel[grid](*args, **kwargs)


def profile(fn: Callable[[], object], top: int, calls: int = 200) -> None:
    """The ``top`` functions by own host time over ``calls`` calls of ``fn``, in µs a call."""
    fn()
    torch.cuda.synchronize()
    torch.cuda._sleep(1_000_000_000)
    profiler = cProfile.Profile()
    start = time.perf_counter()
    profiler.enable()
    for _ in range(calls):
        fn()
    profiler.disable()
    total = (time.perf_counter() - start) / calls * 1e6
    torch.cuda.synchronize()
    stats = pstats.Stats(profiler).stats  # (file, line, name) -> (primitive calls, calls, own s, cumulative s, callers)
    rows = sorted(stats.items(), key=lambda item: -item[1][2])[:top]
    print(f"  {total:.1f} µs a call under the profiler; own time of the top {top}:")
    for (file, line, name), (_, n, own, cumulative, _) in rows:
        where = name if file == "~" else f"{Path(file).parent.name}/{Path(file).name}:{line} {name}"
        print(f"  {own / calls * 1e6:8.1f} µs own {cumulative / calls * 1e6:8.1f} µs with callees "
              f"{n / calls:5.1f}x  {where[-90:]}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--profile", action="store_true", help="cProfile the Triton paths instead of timing them")
    parser.add_argument("--top", type=int, default=15)
    args = parser.parse_args()
    fast = backend.Launcher.__call__
    g = torch.Generator(device="cuda").manual_seed(0)
    print(f"{'shape':22} {'call':22} {'host: triton':>12} {'Launcher':>9} | {'bench: triton':>13} "
          f"{'Launcher':>9} {'GPU alone':>9}   (µs)")
    for b, h, n, d, causal in SHAPES:
        q, k, v, do = (torch.randn((b, h, n, d), device="cuda", dtype=torch.float16, generator=g) for _ in range(4))
        call = registry.op("attention").check(q, k, v, causal=causal)
        tag = f"{b}x{h}x{n}x{d}{' causal' if causal else ''}"
        forward = registry.impl("attention", "triton")
        o, lse = forward.run(call, forward.config())
        bcall = registry.op("attention_backward").check(q, k, v, o, lse, do, causal=causal)
        backward = registry.impl("attention_backward", "triton")
        cases = {"triton fwd": partial(forward.run, call, forward.config()),
                 "triton bwd, dQ pass": partial(backward.run, bcall, backward.config({"DQ": "pass"})),
                 "triton bwd, atomic dQ": partial(backward.run, bcall, backward.config({"DQ": "atomic"}))}
        if args.profile:
            for name in ("triton fwd", "triton bwd, dQ pass"):
                print(f"{tag} {name}")
                profile(cases[name], args.top)
            continue
        for name, fn in cases.items():
            measured = []
            for launch in (through_triton, fast):
                backend.Launcher.__call__ = launch
                measured += [host_us(fn), bench_us(fn)]
            print(f"{tag:22} {name:22} {measured[0]:12.1f} {measured[2]:9.1f} | {measured[1]:13.1f} "
                  f"{measured[3]:9.1f} {bench_us(fn, hide_host=True):9.1f}")
        for plugin in ("cuda", "torch"):
            for op, c in (("attention", call), ("attention_backward", bcall)):
                impl = registry.impl(op, plugin)
                fn = partial(impl.run, c, impl.config())
                name = f"{plugin} {'fwd' if op == 'attention' else 'bwd'}"
                print(f"{tag:22} {name:22} {'':12} {host_us(fn):9.1f} | {'':13} {bench_us(fn):9.1f} "
                      f"{bench_us(fn, hide_host=True):9.1f}")


if __name__ == "__main__":
    main()
