"""``kernelzoo bench``'s measurements: each case timed in this process with ``time_fn``, one :class:`Row` each.

No worker process: a kernel that crashes takes the command with it, and the user sees it. A plugin
that raises gets a "failed" row with the error and the others go on.
"""

from __future__ import annotations

import itertools
import os
import platform
import shlex
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from typing import Any

import torch

import kernelzoo
from kernelzoo import dispatch
from kernelzoo.backends import triton as triton_backend
from kernelzoo.bench.cases import BASELINE, Case, make_call, plugin_config, restorer, throughput, why_not
from kernelzoo.ceilings import Ceilings
from kernelzoo.errors import UnsupportedError
from kernelzoo.fingerprint import fingerprint
from kernelzoo.registry import Call, Op, registry
from kernelzoo.timing import Timing, time_fn


@dataclass
class Row:
    """One plugin on one case: the table's line, one object of the JSON's "rows", a point of the plot."""

    op: str
    plugin: str
    dtype: str
    shape: str  # the representative shape, as --shape takes it: "8192x8192"
    label: str  # the call's Op.shape_string and flags: "4x32x1024x64 causal"
    params: dict[str, Any]  # the op's keyword variant: {"approximate": "tanh"}
    device: str  # "cuda" or "cpu"
    status: str  # "ok"; "skipped": cannot run here; "failed": raised (reason: the error)
    reason: str = ""
    median_ms: float | None = None
    min_ms: float | None = None
    spread: float | None = None  # interquartile range over the median: the noise
    runs: int = 0
    host_ms: float | None = None  # GPU: the host's time to enqueue one call, kept out of median_ms
    flops: float = 0.0
    bytes: float = 0.0
    tflops: float | None = None
    gbs: float | None = None
    floor_ms: float | None = None  # max(FLOPs / peak, bytes / bandwidth) from the device's ceilings
    pct_of_floor: float | None = None  # 100 · floor / median
    bound: str = ""  # "compute" or "memory"
    vs_torch: float | None = None  # torch's median over this one: above 1 is faster than torch
    dispatch: str = ""  # the plugin kernelzoo.ops.<op> would run on these inputs
    dispatch_reason: str = ""
    config: dict[str, Any] = field(default_factory=dict)
    config_origin: str = ""  # "tuned", "tuned nearby" or "default"

    @property
    def group(self) -> tuple:
        return (self.op, self.dtype, self.shape, tuple(self.params.items()))

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def measure(fn: Callable[[], Any], device: torch.device, setup: Callable[[], Any], *, budget_ms: float,
            max_run_ms: float) -> Timing | str:
    """``time_fn`` of ``fn`` after a run that compiles and warms up and a run timed alone; instead of a
    Timing, the reason it was not timed when that run took longer than ``max_run_ms``."""
    setup()
    fn()
    _sync(device)
    setup()
    start = time.perf_counter()
    fn()
    _sync(device)
    once_ms = (time.perf_counter() - start) * 1e3
    if once_ms > max_run_ms:
        return f"not timed: one run takes {once_ms:.4g} ms, more than --max-run-ms {max_run_ms:g}"
    # at least 5 runs, 3 for a call slower than the whole budget (the python plugins on big shapes)
    return time_fn(fn, device, warmup=1, budget_ms=budget_ms, min_repeats=5 if once_ms <= budget_ms else 3,
                   setup=setup, hide_host=True)


def _bench_plugin(row: Row, case: Case, spec: Op, call: Call, restore: Callable[[], None], ceilings: Ceilings | None,
                  budget_ms: float, max_run_ms: float) -> None:
    impl = registry.impl(case.op, case.plugin)
    why = impl.supports(call)
    if why is not None:
        row.status, row.reason = "skipped", why
        return
    config, row.config_origin = plugin_config(spec, impl, call)
    row.config = config
    try:
        timing = measure(lambda: impl.run(call, config), call.device, restore, budget_ms=budget_ms,
                         max_run_ms=max_run_ms)
    except Exception as exc:  # a plugin that raises is a row of the table, not the end of the run
        first_line = (str(exc).strip().splitlines() or [""])[0]
        row.status, row.reason = "failed", f"{type(exc).__name__}: {first_line[:300]}"
        if call.device.type == "cuda":
            torch.cuda.empty_cache()  # after an out-of-memory error, the next plugin gets the memory back
        return
    finally:
        restore()
    if isinstance(timing, str):
        row.status, row.reason = "skipped", timing
        return
    rates = throughput(spec, call, timing.median_ms, ceilings)
    row.status, row.median_ms, row.min_ms, row.spread, row.runs = "ok", timing.median_ms, timing.min_ms, \
        timing.spread, len(timing.times_ms)
    row.host_ms = timing.host_ms if call.device.type == "cuda" else None
    row.tflops, row.gbs, row.pct_of_floor = rates.tflops, rates.gbs, rates.pct_of_floor


def bench_groups(cases: Sequence[Case], device: torch.device | str, ceilings: Ceilings | None, *,
                 budget_ms: float = 100.0, max_run_ms: float = 1000.0, seed: int = 0) -> Iterator[list[Row]]:
    """The rows of each group of ``cases`` (consecutive cases of one op, dtype, shape and variant), one
    group at a time; the group's inputs are made once and shared by its plugins."""
    device = torch.device(device)
    for _, members in itertools.groupby(cases, key=lambda c: (c.op, c.dtype, c.shape, c.params)):
        group = list(members)
        spec, first = registry.op(group[0].op), group[0]
        reasons = {c.plugin: why_not(c, device) for c in group}
        call = make_call(first, device, seed) if any(r is None for r in reasons.values()) else None
        rows = []
        for case in group:
            rows.append(Row(case.op, case.plugin, case.dtype, case.shape_text, first.shape_text, case.kwargs,
                            device.type, "skipped", reasons[case.plugin] or ""))
        if call is not None:
            sizes, restore = throughput(spec, call, 0.0, ceilings), restorer(spec, call)
            for case, row in zip(group, rows):
                row.label = " ".join(filter(None, (spec.shape_string(call), spec.flags(call))))
                row.flops, row.bytes, row.floor_ms, row.bound = sizes.flops, sizes.bytes, sizes.floor_ms, sizes.bound
                if not row.reason:
                    _bench_plugin(row, case, spec, call, restore, ceilings, budget_ms, max_run_ms)
        _compare(rows, spec, call)
        del call
        yield rows


def _compare(rows: list[Row], spec: Op, call: Call | None) -> None:
    """Fill in each row's ratio to torch and the plugin dispatch would choose for these inputs."""
    baseline = next((r.median_ms for r in rows if r.plugin == BASELINE and r.median_ms), None)
    if call is not None:
        try:  # what kernelzoo.explain answers for these inputs (explain is Op.check, then this)
            choice = dispatch.choose(spec, call)
            chosen, reason = choice.plugin, choice.reason
        except UnsupportedError as exc:
            chosen, reason = "none", str(exc)
    for row in rows:
        if baseline and row.median_ms:
            row.vs_torch = baseline / row.median_ms
        if call is not None:
            row.dispatch, row.dispatch_reason = chosen, reason


def versions(device: torch.device | str) -> dict[str, str]:
    """Versions the figures depend on."""
    fp = fingerprint(device)
    found = {"python": platform.python_version(), "torch": torch.__version__, "triton": triton_backend.version(),
             "kernelzoo": kernelzoo.__version__}
    if fp.kind == "cuda":
        found.update(cuda=fp.cuda, nvrtc=fp.nvrtc, driver=fp.driver)
    else:
        found.update(compiler=fp.compiler)
    return found


def meta(device: torch.device | str, ceilings: Ceilings | None, argv: Sequence[str]) -> dict[str, Any]:
    """Where and how the rows were measured: the JSON's "meta" object."""
    fp = fingerprint(device)
    return {"device": fp.describe(), "device_type": fp.kind, "fingerprint": fp.to_dict(),
            "versions": versions(device), "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
            "command": shlex.join(["kernelzoo", *argv]),
            "ceilings": ceilings.to_dict() if ceilings is not None else None,
            "cores": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count(),
            # GPU: time_fn's hide_host (median_ms is GPU time; host_ms the host's enqueue per call)
            "timing": "gpu, host hidden" if fp.kind == "cuda" else "cpu, wall clock",
            # other work on the machine: the 1-minute load average when the run began and ended
            "load": [os.getloadavg()[0]] if hasattr(os, "getloadavg") else []}
