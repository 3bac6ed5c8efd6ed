"""The one harness of the pytest-benchmark suites: a ``bench_<op>.py`` names its ops and calls :func:`run`.

conftest.py parametrises ``case`` from the registry (kernelzoo.bench.cases: each plugin of the ops ×
the dtypes torch takes on the device × the op's representative shapes × its keyword variants), with
ids like ``softmax-triton-float16-8192x8192`` and every plugin of a group, torch's row included, in
the benchmark group ``softmax float16 8192x8192``.

Timing is kernelzoo.timing.time_fn's, through pytest-benchmark's pedantic mode: one call per round
after two warm-up calls, its inputs restored (in-place ops) and, on the GPU, the 50 MB L2 flushed in
the untimed setup. On the GPU the round is timed by CUDA events (:func:`cuda_event_timer`, set as the
group's timer by conftest.py), so a round's time is the kernel's on the GPU, exactly as time_fn
measures it; on the CPU by perf_counter, pytest-benchmark's default. Rounds:
--benchmark-max-time over one call's time, at least --benchmark-min-rounds, at most 1000; 3 for calls
slower than a second (the python plugins on big shapes).
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest
import torch

from kernelzoo import dispatch
from kernelzoo.bench.cases import Case, make_call, plugin_config, restorer, throughput, why_not
from kernelzoo.calibrate import ceilings_here
from kernelzoo.ceilings import Ceilings
from kernelzoo.errors import UnsupportedError
from kernelzoo.registry import Call, registry
from kernelzoo.timing import flush_l2

# A 5 µs kernel: 1000 rounds of flush (~0.1 ms for 256 MB at 3 TB/s) and call take ~0.15 s.
MAX_ROUNDS = 1000
# Calls slower than this (the python plugins at the large shapes take seconds a call) get SLOW_ROUNDS.
SLOW_S = 1.0
SLOW_ROUNDS = 3


@dataclass(frozen=True)
class BenchConfig:
    """The session's device and pytest-benchmark's round options."""

    device: torch.device
    min_rounds: int
    max_time: float  # seconds of timed rounds per benchmark

    @functools.cached_property
    def ceilings(self) -> Ceilings | None:
        """Built in, stored, or measured once now (about a second) and stored."""
        return ceilings_here(self.device)


_begin: list[torch.cuda.Event] = []


def cuda_event_timer() -> float:
    """A pytest-benchmark timer that pytest-benchmark reads twice around each round (pedantic mode: start,
    call, end). The first read records a CUDA event and returns 0; the second records another, waits for
    it and returns the seconds between the two on the GPU. The round's setup (the L2 flush) is still
    running on the GPU when both events and the call are queued, so no launch gap is timed."""
    event = torch.cuda.Event(enable_timing=True)
    event.record()
    if not _begin:
        _begin.append(event)
        return 0.0
    event.synchronize()
    return _begin.pop().elapsed_time(event) / 1e3


_group: dict[str, Any] = {}  # the inputs of the group being run: its consecutive cases share them


def _inputs(case: Case, device: torch.device) -> tuple[Call, Callable[[], None]]:
    key = (case.op, case.dtype, case.shape, case.params, str(device))
    if _group.get("key") != key:
        _group.clear()  # frees the last group's tensors before making these
        call = make_call(case, device)
        _group.update(key=key, call=call, restore=restorer(registry.op(case.op), call))
    return _group["call"], _group["restore"]


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _once_s(fn: Callable[[], Any], setup: Callable[[], None], device: torch.device) -> float:
    """Seconds of one call, timed after a call that compiles and warms up."""
    for _ in range(2):
        setup()
        _sync(device)
        start = time.perf_counter()
        fn()
        _sync(device)
    return time.perf_counter() - start


def rounds(once_s: float, min_rounds: int, max_time: float) -> int:
    """Timed rounds for a call of ``once_s`` seconds under pytest-benchmark's min-rounds and max-time."""
    if once_s > SLOW_S:
        return SLOW_ROUNDS
    return max(min_rounds, min(MAX_ROUNDS, int(max_time / max(once_s, 1e-7))))


def run(benchmark: Any, case: Case, config: BenchConfig) -> None:
    """Benchmark ``case`` on the session's device; skip with the reason when its plugin cannot run it here."""
    benchmark.group = case.group
    device = config.device
    why = why_not(case, device)
    if why is not None:
        pytest.skip(why)
    spec, impl = registry.op(case.op), registry.impl(case.op, case.plugin)
    call, restore = _inputs(case, device)
    why = impl.supports(call)
    if why is not None:
        pytest.skip(why)
    params, origin = plugin_config(spec, impl, call)

    def fn() -> Any:
        return impl.run(call, params)

    def setup() -> None:  # returns None: pedantic would take a returned value for the call's arguments
        restore()
        if device.type == "cuda":
            flush_l2(device)

    if benchmark.disabled:  # --benchmark-disable: run once, as a test
        benchmark.pedantic(fn, setup=setup)
        restore()
        return
    n = rounds(_once_s(fn, setup, device), config.min_rounds, config.max_time)
    _begin.clear()  # a round that raised left its start event
    benchmark.pedantic(fn, setup=setup, rounds=n)
    restore()
    rates = throughput(spec, call, benchmark.stats.stats.median * 1e3, config.ceilings)
    try:
        chosen = dispatch.choose(spec, call).plugin
    except UnsupportedError:
        chosen = "none"
    benchmark.extra_info.update(plugin=case.plugin, config=params, config_origin=origin, device=device.type,
                                dispatch=chosen, **rates.to_dict())
