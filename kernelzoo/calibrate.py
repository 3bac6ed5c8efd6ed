"""Measuring a device's ceilings (copy bandwidth, matmul rates) and finding the ones a floor is computed from.

The tuner's worker (its ``calibrate`` request), ``kernelzoo bench``, the pytest benchmarks and the
examples all measure with :func:`measure`. :func:`ceilings_here` gives the ceilings of a device:
the built-in table for known GPUs, else the calibration stored for its fingerprint, else one
measured now (about a second) and stored, as ``kernelzoo tune`` does.
"""

from __future__ import annotations

import os
import sys
import warnings
from datetime import date
from typing import TYPE_CHECKING, Any

import torch

from kernelzoo.ceilings import Ceilings, device_ceilings
from kernelzoo.errors import DatabaseError
from kernelzoo.fingerprint import fingerprint
from kernelzoo.timing import time_fn

if TYPE_CHECKING:
    from kernelzoo.db.store import Store


def current_load() -> float | None:
    """The 1-minute load average, where the system has one."""
    return os.getloadavg()[0] if hasattr(os, "getloadavg") else None


def usable_cores() -> int:
    """The cores this process may run on."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


def load_note(load: list[float], cores: int | None) -> str:
    """Words for a run whose 1-minute load average went above half the cores (other work shared the machine),
    else ''."""
    cores = cores or 1
    if not load or max(load) <= 0.5 * cores:
        return ""
    return (f"the machine was busy (load average {max(load):.1f} on {cores} cores): other work shared it, "
            "so the times are noisy and may be slow")


def describe(measured: dict[str, Any], with_load: bool = True) -> str:
    """A calibration in one line: its rates, their noise and (``with_load``) the load it saw if that was high."""
    noise = measured.get("noise") or {}
    rates = ", ".join(f"{d} {t:.3g}" + (f" (noise {100 * noise[d]:.0f}%)" if d in noise else "")
                      for d, t in measured["tflops"].items())
    copy_noise = f" (noise {100 * noise['copy']:.0f}%)" if "copy" in noise else ""
    note = load_note(measured.get("load") or [], measured.get("cores")) if with_load else ""
    return (f"copy {measured['bandwidth_gbs']:.4g} GB/s{copy_noise}, matmul TFLOP/s {rates}"
            + (f"; {note}" if note else ""))


def measure(device: torch.device | str, budget_ms: float = 100.0) -> dict[str, Any]:
    """Copy bandwidth (bytes read + written, GB/s) and matmul rates by dtype name (TFLOP/s), measured here, with
    each one's noise (the interquartile range of its runs over their median), the 1-minute load average before
    and after, and the cores."""
    device = torch.device(device)
    load = [current_load()]
    n = (256 << 20 if device.type == "cuda" else 64 << 20) // 4  # floats: past the 50 MB L2 / the CPU's L3
    src, dst = torch.full((n,), 1.5, device=device), torch.zeros(n, device=device)
    # the best run, not the median: a ceiling is what the machine can do, not what it usually does
    copy = time_fn(lambda: dst.copy_(src), device, budget_ms=budget_ms)
    tflops, noise = {}, {"copy": copy.spread}
    size = 4096 if device.type == "cuda" else 1024
    dtypes = (torch.float32, torch.float16, torch.bfloat16) if device.type == "cuda" else (torch.float32,)
    for dtype in dtypes:
        a, b = torch.randn(size, size, device=device, dtype=dtype), torch.randn(size, size, device=device, dtype=dtype)
        t = time_fn(lambda a=a, b=b: a @ b, device, budget_ms=budget_ms)
        tflops[str(dtype).removeprefix("torch.")] = 2 * size**3 / (t.min_ms * 1e-3) / 1e12
        noise[str(dtype).removeprefix("torch.")] = t.spread
    load.append(current_load())
    return {"bandwidth_gbs": 2 * n * 4 / (copy.min_ms * 1e-3) / 1e9, "tflops": tflops, "noise": noise,
            "load": [x for x in load if x is not None], "cores": usable_cores()}


def calibrate(device: torch.device | str, store: Store | None = None) -> dict[str, Any]:
    """Measure ``device`` and store the result for its fingerprint; the stored dict (with its source)."""
    from kernelzoo.db import records
    from kernelzoo.db.store import open_store

    found = measure(device)
    busy = load_note(found["load"], found["cores"])
    source = f"measured calibration, {date.today().isoformat()}" + (
        f", under load {max(found['load']):.1f} on {found['cores']} cores (rerun kernelzoo bench --calibrate on "
        "an idle machine)" if busy else "")
    measured = {**found, "source": source}
    try:
        records.save_device_ceilings(store or open_store(), fingerprint(device), measured)
    except DatabaseError as exc:  # the figures still serve this run
        warnings.warn(f"kernelzoo: the calibration was not stored: {exc}", RuntimeWarning, stacklevel=2)
    return measured


def stored(device: torch.device | str, store: Store | None = None) -> dict[str, Any] | None:
    """The calibration stored for ``device``, if any (None, with a warning, when the database is unusable)."""
    from kernelzoo.db import records
    from kernelzoo.db.store import open_store

    try:
        return records.device_ceilings(store or open_store(), fingerprint(device))
    except DatabaseError as exc:
        warnings.warn(f"kernelzoo: stored ceilings not read: {exc}", RuntimeWarning, stacklevel=2)
        return None


def ceilings_here(device: torch.device | str, store: Store | None = None, *,
                  measure_missing: bool = True) -> Ceilings | None:
    """The ceilings of ``device``: built-in, stored, or (``measure_missing``) measured now and stored."""
    fp = fingerprint(device)
    found = device_ceilings(fp, stored(device, store))
    if found is None and measure_missing:
        print(f"kernelzoo: measuring the ceilings of {fp.describe()} (copy bandwidth, matmul rate) once",
              file=sys.stderr)
        found = device_ceilings(fp, calibrate(device, store))
    return found
