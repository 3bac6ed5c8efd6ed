"""Why the tuned dispatch (``kernelzoo.ops.attention``) can time slower than the plugin it runs, called
directly with the same config: both paths on the same inputs, in interleaved rounds, each round giving
the host's time per call (the GPU kept busy, so no call waits for it), the benchmark's time (L2 flushed,
host visible: attention_bench.py's settings), its quartiles over the round's calls, and the garbage
collections and their total pause during the round.

    python scripts/attention_dispatch_probe.py [--rounds 5]
"""

from __future__ import annotations

import argparse
import gc
import json
import statistics
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path

import torch

from kernelzoo import ops
from kernelzoo.registry import registry
from kernelzoo.timing import time_fn

SHAPES = [(4, 32, 1024, 64, False), (4, 32, 1024, 64, True), (4, 32, 1024, 128, False), (4, 32, 1024, 128, True),
          (4, 32, 4096, 128, False)]


class GcWatch:
    """Counts collections and their pause (ms) while installed."""

    def __init__(self) -> None:
        self.count, self.ms, self._start = 0, 0.0, 0.0
        gc.callbacks.append(self)

    def __call__(self, phase: str, info: dict) -> None:
        if phase == "start":
            self._start = time.perf_counter()
        else:
            self.count += 1
            self.ms += (time.perf_counter() - self._start) * 1e3

    def take(self) -> tuple[int, float]:
        out = (self.count, round(self.ms, 2))
        self.count, self.ms = 0, 0.0
        return out


def host_us(fn: Callable[[], object], calls: int = 100) -> float:
    torch.cuda.synchronize()
    torch.cuda._sleep(200_000_000)  # the GPU stays busy: no launch waits for it
    start = time.perf_counter()
    for _ in range(calls):
        fn()
    us = (time.perf_counter() - start) / calls * 1e6
    torch.cuda.synchronize()
    return us


def stored_config(records: list[dict], op: str, shape: str, flags: str) -> dict:
    here = torch.cuda.get_device_name()
    return next(r["config"] for r in records if r["op"] == op and r["plugin"] == "triton" and r["dtype"] == "float16"
                and r["shape"] == shape and r["flags"] == flags and r["device"]["name"] == here)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--winners", default="tuning_db/h100-sxm.json")
    args = parser.parse_args()
    records = json.loads(Path(args.winners).read_text())["records"]
    watch = GcWatch()
    g = torch.Generator(device="cuda").manual_seed(0)
    fwd, bwd = registry.impl("attention", "triton"), registry.impl("attention_backward", "triton")
    for b, h, n, d, causal in SHAPES:
        shape, flags = f"{b}x{h}x{n}x{d}", "causal" if causal else ""
        q, k, v, do = (torch.randn((b, h, n, d), device="cuda", dtype=torch.float16, generator=g) for _ in range(4))
        call = registry.op("attention").check(q, k, v, causal=causal)
        fc = fwd.config(stored_config(records, "attention", shape, flags))
        o, lse = fwd.run(call, fc)
        bcall = registry.op("attention_backward").check(q, k, v, o, lse, do, causal=causal)
        bc = bwd.config(stored_config(records, "attention_backward", shape, flags))
        paths = {"fwd direct": partial(fwd.run, call, fc),
                 "fwd ops.attention": partial(ops.attention, q, k, v, causal=causal),
                 "bwd direct": partial(bwd.run, bcall, bc),
                 "bwd ops.attention_backward": partial(ops.attention_backward, q, k, v, o, lse, do, causal=causal)}
        for fn in paths.values():
            fn()
        print(f"\n{shape} {flags or 'non-causal'}: forward {fc}, backward {bc}")
        print(f"{'round':>5} {'path':28} {'host µs':>8} {'bench µs':>9} {'q1':>7} {'q3':>7} {'calls':>5} {'gc':>3} "
              f"{'gc ms':>6} {'GPU µs':>7}")
        for r in range(args.rounds):
            for name, fn in paths.items():
                host = host_us(fn)
                watch.take()
                t = time_fn(fn, "cuda", budget_ms=60, warmup=2, min_repeats=3)
                collections, pause = watch.take()
                q1, _, q3 = statistics.quantiles(t.times_ms, n=4)
                gpu = time_fn(fn, "cuda", budget_ms=30, warmup=1, min_repeats=3, hide_host=True).median_ms
                print(f"{r:5} {name:28} {host:8.1f} {t.median_ms * 1e3:9.1f} {q1 * 1e3:7.1f} {q3 * 1e3:7.1f} "
                      f"{len(t.times_ms):5} {collections:3} {pause:6.2f} {gpu * 1e3:7.1f}", flush=True)


if __name__ == "__main__":
    main()
