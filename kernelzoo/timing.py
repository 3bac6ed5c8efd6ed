"""Timing a kernel the same way everywhere (tuner, ``kernelzoo bench``, benchmarks).

GPU: CUDA events around each run, the 50 MB L2 flushed before each one by reading a 256 MB
buffer (outside the events; see flush_l2), after a warm-up that keeps compilation and module loads out. The
events time the GPU from the first event to the last, so a call whose host work (argument checks,
allocation, the launches themselves) outlasts the flush shows that host time too; with
``hide_host`` the GPU first waits (``torch.cuda._sleep``) for longer than the host takes to enqueue
one call, so the events hold the call's GPU time alone, and the host time per call is reported beside it.
CPU: ``time.perf_counter`` around each run. Both report the median and the spread of many
runs; the repeat count adapts so a measurement takes about ``budget_ms``.
"""

from __future__ import annotations

import functools
import random
import statistics
import time
from collections.abc import Callable, Hashable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

import torch

K = TypeVar("K", bound=Hashable)
_flush_buffers: dict[torch.device, tuple[torch.Tensor, torch.Tensor]] = {}  # (buffer, its sum)
L2_FLUSH_BYTES = 256 << 20


@dataclass(frozen=True)
class Timing:
    """Times of repeated runs, in milliseconds."""

    times_ms: tuple[float, ...]
    host_ms: float | None = None  # GPU: the host's time to enqueue one call (median over the warm-up)

    @property
    def median_ms(self) -> float:
        return statistics.median(self.times_ms)

    @property
    def min_ms(self) -> float:
        return min(self.times_ms)

    @property
    def spread(self) -> float:
        """Interquartile range over the median: the relative noise of this measurement."""
        if len(self.times_ms) < 4:
            return 0.0
        q1, _, q3 = statistics.quantiles(self.times_ms, n=4)
        return (q3 - q1) / self.median_ms if self.median_ms > 0 else 0.0


def flush_l2(device: torch.device) -> None:
    """Evict the GPU's L2 by reading a 256 MB buffer on the current stream (before each timed run).

    A read, not a write: a write flush (``buf.zero_()``, as ``triton.testing.do_bench`` does) leaves the L2
    full of dirty lines, and the timed kernel pays for writing them back as it evicts them, which weighs most
    on short kernels (docs/perf/method.md, docs/design/rows.md). A read also writes back what the previous run
    left dirty, outside the timed window."""
    if device.index is None:  # one buffer for 'cuda' and 'cuda:0' (a tensor's device names its index)
        device = torch.device(device.type, torch.cuda.current_device())
    bufs = _flush_buffers.get(device)
    if bufs is None:
        buf = torch.zeros(L2_FLUSH_BYTES // 4, dtype=torch.float32, device=device)
        bufs = _flush_buffers[device] = (buf, torch.empty((), dtype=torch.float32, device=device))
    torch.sum(bufs[0], dim=0, out=bufs[1])


def time_fn(fn: Callable[[], Any], device: torch.device | str, *, warmup: int = 3,
            budget_ms: float = 200.0, min_repeats: int = 5, max_repeats: int = 500,
            flush_l2: bool = True, setup: Callable[[], Any] | None = None, hide_host: bool = False) -> Timing:
    """Run ``fn`` ``warmup`` times, then time it repeatedly on ``device``.

    ``setup`` runs before every call, untimed (in-place kernels restore their inputs there).
    ``hide_host`` (GPU): time the GPU's work alone, the host's enqueue kept out (see the module).
    """
    device = torch.device(device)
    setup = setup or (lambda: None)
    if device.type == "cuda":
        return _time_cuda(fn, setup, device, warmup, budget_ms, min_repeats, max_repeats, flush_l2, hide_host)
    return _time_cpu(fn, setup, warmup, budget_ms, min_repeats, max_repeats)


def _repeats(estimate_ms: float, budget_ms: float, lo: int, hi: int) -> int:
    return max(lo, min(hi, int(budget_ms / max(estimate_ms, 1e-4))))


def _time_cpu(fn: Callable[[], Any], setup: Callable[[], Any], warmup: int, budget_ms: float, lo: int,
              hi: int) -> Timing:
    estimate = 0.0
    for _ in range(max(warmup, 1)):
        setup()
        t0 = time.perf_counter()
        fn()
        estimate = (time.perf_counter() - t0) * 1e3
    times = []
    for _ in range(_repeats(estimate, budget_ms, lo, hi)):
        setup()
        t0 = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t0) * 1e3)
    return Timing(tuple(times))


@functools.cache
def _sleep_cycles_per_ms(device: torch.device) -> float:
    """GPU clock cycles per millisecond of ``torch.cuda._sleep`` on ``device``, measured once."""
    with torch.cuda.device(device):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        torch.cuda._sleep(1_000_000)  # the first call loads the kernel
        start.record()
        torch.cuda._sleep(10_000_000)
        end.record()
        torch.cuda.synchronize()
        return 10_000_000 / start.elapsed_time(end)


def _time_cuda(fn: Callable[[], Any], setup: Callable[[], Any], device: torch.device, warmup: int,
               budget_ms: float, lo: int, hi: int, flush: bool, hide_host: bool) -> Timing:
    with torch.cuda.device(device):
        host = []
        for _ in range(max(warmup, 1)):
            setup()
            t0 = time.perf_counter()
            fn()
            host.append((time.perf_counter() - t0) * 1e3)
            torch.cuda.synchronize()
        host_ms = statistics.median(host)
        # the wait covers the enqueue of one call twice over (the host may be descheduled now and then)
        wait_cycles = int((2 * host_ms + 0.02) * _sleep_cycles_per_ms(device)) if hide_host else 0
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        setup()
        if wait_cycles:
            torch.cuda._sleep(wait_cycles)
        start.record()
        fn()
        end.record()
        torch.cuda.synchronize()
        n = _repeats(start.elapsed_time(end), budget_ms, lo, hi)
        events = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
                  for _ in range(n)]
        for begin, finish in events:
            setup()
            if flush:
                flush_l2(device)
            if wait_cycles:
                torch.cuda._sleep(wait_cycles)
            begin.record()
            fn()
            finish.record()
        torch.cuda.synchronize()
    return Timing(tuple(b.elapsed_time(f) for b, f in events), host_ms)


def time_rounds(fns: Mapping[K, Callable[[], Any]], device: torch.device | str, *, rounds: int = 3,
                **options: Any) -> dict[K, list[float]]:
    """Each candidate's median ms in each of ``rounds`` rounds of time_fn(fn, device, **options): every round
    times them all, each round in its own order (shuffled, seeded by the round), so that a drift of the clocks
    during the run meets every candidate alike. The caller takes the median of a candidate's rounds."""
    times: dict[K, list[float]] = {key: [] for key in fns}
    order = list(fns)
    for r in range(rounds):
        random.Random(r).shuffle(order)
        for key in order:
            times[key].append(time_fn(fns[key], device, **options).median_ms)
    return times
