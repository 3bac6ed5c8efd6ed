"""Timing a kernel the same way everywhere (tuner, ``kernelzoo bench``, benchmarks).

GPU: CUDA events around each run, the 50 MB L2 flushed before each one by reading a 256 MB
buffer (outside the events; see flush_l2), after a warm-up that keeps compilation and module loads out. The
events time the GPU from the first event to the last, so a call whose host work (argument checks,
allocation, the launches themselves) outlasts the flush shows that host time too; with
``hide_host`` the GPU first waits (``torch.cuda._sleep``) for longer than the host takes to enqueue
one call, so the events hold the call's GPU time alone, and the host time per call is reported beside it.
CPU: ``time.perf_counter`` around each run. Both report the median and the spread of many
runs; the repeat count adapts so a measurement takes about ``budget_ms``.

A steady measurement can still be wrong: on a host whose cores other processes keep busy, a kernel
is timed many times slower with a small spread. So each measurement also reads the machine's load
over its timed runs (:class:`Load`): how long the timing thread waited for a CPU, the CPU share it
got, the kernel's CPU pressure, the load average, and on a GPU the other processes using it (NVML,
where ``pynvml`` is installed). :meth:`Load.busy` says when that load makes the figure unusable; the tuner
then stores no winner from it and measures it again later.
"""

from __future__ import annotations

import functools
import os
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


# Load.busy's thresholds. A CPU timing is unusable when its thread spent most of the timed wall time waiting in the
# run queue for a CPU that other tasks held, and was put back on a CPU at least once for every other run (so that
# the median run, not just a few, holds such a wait); it then runs many times slower than on a free core, however
# steady. A thread that sleeps or waits on memory is not waiting for a CPU. Without the scheduler's per-thread
# figures, a thread that got little CPU while the kernel saw tasks waiting most of the time stands in for it.
BUSY_WAITED = 0.9
BUSY_SLICES_PER_RUN = 0.5
BUSY_SHARE = 0.1
BUSY_PRESSURE = 0.9
BUSY_GPU_UTIL = 10  # percent of the SMs another process used while a GPU timing ran


@dataclass(frozen=True)
class Load:
    """The machine's load over a measurement's timed runs."""

    cores: int
    loadavg: float  # the 1-minute load average, per core
    share: float | None = None  # the timing thread's CPU time over the wall time (1.0: it never waited)
    waited: float | None = None  # the share of the wall time the timing thread waited for a CPU (schedstat)
    pressure: float | None = None  # the share of the wall time some task waited for a CPU (Linux PSI)
    slices_per_run: float | None = None  # times the timing thread was put on a CPU, per timed run (schedstat)
    gpu_others: int | None = None  # other processes that used the GPU while it was timed (NVML)

    def busy(self, device_type: str) -> str | None:
        """Why a timing on ``device_type`` under this load cannot be trusted, or None."""
        if device_type == "cuda":
            if self.gpu_others:
                return f"{self.gpu_others} other process(es) used the GPU while it was timed"
            return None
        if self.waited is not None:
            if self.waited < BUSY_WAITED or (self.slices_per_run or 0.0) < BUSY_SLICES_PER_RUN:
                return None
            why = f"the timing thread waited for a CPU {self.waited:.0%} of the time"
        elif (self.share is not None and self.share < BUSY_SHARE and self.pressure is not None
              and self.pressure >= BUSY_PRESSURE):
            why = (f"the timing thread got {self.share:.0%} of a core while tasks waited for a CPU "
                   f"{self.pressure:.0%} of the time")
        else:
            return None
        return f"the host was busy: {why} (load average {self.loadavg:.1f} per core)"


def _read_number(path: str, pick: Callable[[str], str]) -> float | None:
    try:
        with open(path) as f:
            return float(pick(f.read()))
    except (OSError, IndexError, ValueError):
        return None


def _schedstat() -> tuple[float, float] | None:
    """Nanoseconds this thread has waited in a run queue, and times it was put on a CPU
    (/proc/thread-self/schedstat), or None."""
    try:
        with open("/proc/thread-self/schedstat") as f:
            _, waited, slices = f.read().split()[:3]
        return float(waited), float(slices)
    except (OSError, ValueError):
        return None


def _pressure_us() -> float | None:
    """Microseconds some task has waited for a CPU since boot (Linux PSI), or None."""
    return _read_number("/proc/pressure/cpu", lambda text: text.splitlines()[0].rsplit("total=", 1)[1])


class LoadMeter:
    """Reads the load between ``start()`` and ``stop()`` (on the timing thread); on a GPU, the other processes
    using it."""

    def __init__(self, device: torch.device) -> None:
        self.device = device
        self.cores = os.cpu_count() or 1

    def start(self) -> None:
        self._wall, self._cpu = time.perf_counter(), time.thread_time()
        self._sched, self._pressure = _schedstat(), _pressure_us()
        self._gpu_since = _gpu_now_us() if self.device.type == "cuda" else None

    def stop(self, runs: int) -> Load:
        """The load since ``start()``, over which the thread timed ``runs`` runs."""
        wall = time.perf_counter() - self._wall
        cpu, sched, pressure = time.thread_time() - self._cpu, _schedstat(), _pressure_us()
        waited = slices = None
        if sched is not None and self._sched is not None:
            waited, slices = sched[0] - self._sched[0], (sched[1] - self._sched[1]) / max(runs, 1)

        def fraction(now: float | None, before: float | None, unit: float) -> float | None:
            if now is None or before is None or wall <= 0:
                return None
            return max(0.0, min(1.0, (now - before) / unit / wall))

        return Load(cores=self.cores, loadavg=os.getloadavg()[0] / self.cores,
                    share=fraction(cpu, 0.0, 1.0), waited=fraction(waited, 0.0, 1e9),
                    pressure=fraction(pressure, self._pressure, 1e6), slices_per_run=slices,
                    gpu_others=_gpu_others(self.device, self._gpu_since) if self._gpu_since is not None else None)


def _gpu_now_us() -> int:
    return int(time.time() * 1e6)


def _gpu_others(device: torch.device, since_us: int) -> int | None:
    """Processes other than this one and its siblings (the tuner's other workers) that used the device's SMs since
    ``since_us``, by NVML's per-process samples; None where NVML cannot say."""
    try:
        import pynvml
    except ImportError:
        return None
    try:
        pynvml.nvmlInit()
        index = device.index if device.index is not None else torch.cuda.current_device()
        uuid = getattr(torch.cuda.get_device_properties(index), "uuid", None)  # NVML's order ignores
        handle = (pynvml.nvmlDeviceGetHandleByUUID(f"GPU-{uuid}") if uuid is not None  # CUDA_VISIBLE_DEVICES
                  else pynvml.nvmlDeviceGetHandleByIndex(index))
        samples = pynvml.nvmlDeviceGetProcessUtilization(handle, since_us)
    except Exception:  # NVML missing, not permitted, or no samples in the window (NVML raises NOT_FOUND)
        return None
    mine = {os.getpid(), os.getppid()}
    busy = {s.pid for s in samples if s.smUtil >= BUSY_GPU_UTIL and s.pid not in mine
            and _parent(s.pid) != os.getppid()}
    return len(busy)


def _parent(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return int(f.read().rsplit(")", 1)[1].split()[1])
    except (OSError, IndexError, ValueError):
        return None


@dataclass(frozen=True)
class Timing:
    """Times of repeated runs, in milliseconds."""

    times_ms: tuple[float, ...]
    host_ms: float | None = None  # GPU: the host's time to enqueue one call (median over the warm-up)
    load: Load | None = None  # the machine's load over the timed runs

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
    meter = LoadMeter(torch.device("cpu"))
    meter.start()
    for _ in range(_repeats(estimate, budget_ms, lo, hi)):
        setup()
        t0 = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t0) * 1e3)
    return Timing(tuple(times), load=meter.stop(len(times)))


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
        meter = LoadMeter(device)
        meter.start()
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
        load = meter.stop(len(events))
    return Timing(tuple(b.elapsed_time(f) for b, f in events), host_ms, load)


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
