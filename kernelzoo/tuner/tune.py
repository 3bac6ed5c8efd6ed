"""Tuning an op: every plugin on every shape and dtype, in workers, into the database.

The parent never initialises CUDA: which plugins can run, the call's key, the device's
fingerprint and every trial come from the workers. ``torch.cuda.is_available()`` (which
creates no context) only picks the default device.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import date
from typing import Any

import torch

from kernelzoo import dispatch
from kernelzoo.ceilings import Ceilings, device_ceilings
from kernelzoo.db import records
from kernelzoo.db.models import Origin
from kernelzoo.db.ranking import by_key, pick_winner
from kernelzoo.db.store import Store
from kernelzoo.errors import ArgumentError, UnsupportedError
from kernelzoo.fingerprint import Fingerprint, cpu_fingerprint
from kernelzoo.registry import DTYPE_NAMES, dtype_name, parse_dtype, registry
from kernelzoo.tuner.leaders import retime_leaders
from kernelzoo.tuner.pool import WorkerLost, WorkerPool
from kernelzoo.tuner.progress import Progress
from kernelzoo.tuner.search import SearchResult, Target, TuneOptions, search

PROBE = "(device)"  # the pool key of a worker that only reports on the device


@dataclass
class PluginReport:
    """One plugin at one shape: its search, or why it was not tuned."""

    plugin: str
    result: SearchResult | None = None
    skipped: str = ""


@dataclass
class ShapeReport:
    """Every plugin of an op at one shape, dtype and flags on one device, and the winner."""

    op: str
    device: str
    dtype: str
    shape_text: str
    bucket: tuple[int, ...]
    bucket_text: str  # the bucket in words (Op.describe_bucket)
    flags: str
    fingerprint: Fingerprint
    flops: float = 0.0
    bytes: float = 0.0
    ceilings: Ceilings | None = None
    plugins: list[PluginReport] = field(default_factory=list)
    winner: str | None = None


def plugins_for(op: str, device: str, requested: Sequence[str] | None) -> list[str]:
    """The requested plugins (checked), else those dispatch may choose on ``device`` automatically."""
    known = [i.plugin for i in registry.implementations(op)]
    for plugin in requested or ():
        registry.impl(op, plugin)  # UnknownError listing the op's plugins
    return list(requested) if requested else dispatch.plugin_order(torch.device(device).type, known)


def default_dtypes(op: str, plugins: Sequence[str], kind: str) -> list[str]:
    """The dtypes tuned when none is asked for: those the plugins take on ``kind`` that the op tunes there."""
    offered = {d for p in plugins for d in registry.impl(op, p).dtypes.get(kind, ())}
    wanted = registry.op(op).tune_dtypes.get(kind, DTYPE_NAMES)
    return [dtype_name(d) for d in DTYPE_NAMES if d in offered and d in wanted]


def key_axes(op: str, device: str, plugins: Sequence[str] | None, shapes: Sequence[tuple[int, ...]] | None,
             dtypes: Sequence[str] | None) -> tuple[list[str], list[tuple[int, ...]], list[str]]:
    """The plugins, shapes and dtype names ``op`` is tuned at on ``device``: those asked for (checked), else its
    defaults there; ArgumentError when it has no plugin or no shape there."""
    spec = registry.op(op)
    kind = torch.device(device).type
    names = plugins_for(op, device, plugins)
    if not names:
        raise ArgumentError(f"{op}: no plugin of it is chosen automatically on {kind}; pass --plugin")
    shapes = list(shapes) if shapes else list(spec.shapes.get(kind, ()))
    if not shapes:
        raise ArgumentError(f"{op}: no representative shapes for {kind}; pass --shape, e.g. --shape 1024x1024")
    dtype_names = [dtype_name(parse_dtype(d)) for d in dtypes] if dtypes else default_dtypes(op, names, kind)
    return names, shapes, dtype_names


def device_fingerprint(pool: WorkerPool, device: str, plugin: str = PROBE) -> Fingerprint:
    """The device's fingerprint: the CPU's here, a GPU's from ``plugin``'s worker (its context stays there)."""
    if torch.device(device).type == "cpu":
        return cpu_fingerprint()
    return Fingerprint.from_dict(pool.hello(plugin, device)["fingerprint"])


def ceilings_for(store: Store, pool: WorkerPool, fp: Fingerprint, device: str, progress: Progress,
                 plugin: str = PROBE) -> Ceilings | None:
    """Built-in ceilings, else a stored calibration, else one measured now (about a second) and stored."""
    found = device_ceilings(fp, records.device_ceilings(store, fp))
    if found is not None:
        return found
    progress.note(f"measuring the ceilings of {fp.describe()} (copy bandwidth, matmul rate) once")
    try:
        reply = pool.request(plugin, device, {"cmd": "calibrate", "device": device}, timeout=300)
    except WorkerLost as lost:
        progress.note(f"calibration failed: {lost}")
        return None
    if not reply.get("ok"):
        progress.note(f"calibration failed: {reply.get('message')}")
        return None
    measured = {"bandwidth_gbs": reply["bandwidth_gbs"], "tflops": reply["tflops"],
                "source": f"measured calibration, {date.today().isoformat()}"}
    records.save_device_ceilings(store, fp, measured)
    return device_ceilings(fp, measured)


def tune_op(store: Store, pool: WorkerPool, op: str, *, device: str, plugins: Sequence[str] | None = None,
            shapes: Sequence[tuple[int, ...]] | None = None, dtypes: Sequence[str] | None = None,
            params: Sequence[Mapping[str, Any]] = ({},), options: TuneOptions | None = None,
            progress: Progress | None = None, only: Mapping[str, Sequence[Mapping[str, Any]]] | None = None,
            origin: Origin = Origin.TUNED, fp: Fingerprint | None = None) -> list[ShapeReport]:
    """Tune ``op`` for every shape × params × dtype; store each plugin's best; one report per key.

    ``only`` (plugin -> configs) measures just those configs of just those plugins (``tune --stale`` and
    ``--verify``), and ``origin`` is the stored winners' origin.
    """
    options = options or TuneOptions()
    progress = progress or Progress(enabled=False)
    names, shapes, dtype_names = key_axes(op, device, plugins if only is None else list(only), shapes, dtypes)
    pool.start(names, device)
    fp = fp or device_fingerprint(pool, device, names[0])
    ceilings = (ceilings_for(store, pool, fp, device, progress, names[0]) if options.calibrate
                else device_ceilings(fp, records.device_ceilings(store, fp)))
    reports = []
    for shape in shapes:
        for kwargs in params:
            for dtype in dtype_names:
                reports.append(_tune_key(store, pool, op, names, device, dtype, tuple(shape), kwargs, fp,
                                         ceilings, options, progress, only, origin))
    dispatch.clear_cache()  # this process's next calls see the new winners
    return reports


def _tune_key(store: Store, pool: WorkerPool, op: str, names: list[str], device: str, dtype: str,
              shape: tuple[int, ...], kwargs: Mapping[str, Any], fp: Fingerprint, ceilings: Ceilings | None,
              options: TuneOptions, progress: Progress, only: Mapping[str, Sequence[Mapping[str, Any]]] | None = None,
              origin: Origin = Origin.TUNED) -> ShapeReport:
    call = {"op": op, "device": device, "dtype": dtype, "shape": list(shape), "params": dict(kwargs)}
    report: ShapeReport | None = None
    plugin_reports = []
    for plugin in names:
        try:
            found = pool.request(plugin, device, {"cmd": "describe", "plugin": plugin, **call},
                                 timeout=max(options.timeout_s, 120.0))
        except WorkerLost as lost:
            plugin_reports.append(PluginReport(plugin, skipped=str(lost)))
            continue
        if not found.get("ok"):
            plugin_reports.append(PluginReport(plugin, skipped=found.get("message", "describe failed")))
            continue
        if report is None:
            report = ShapeReport(op, device, dtype, found["shape_text"], tuple(found["bucket"]), found["bucket_text"],
                                 found["flags"], fp, found["flops"], found["bytes"], ceilings)
        if found["supports"] is not None:
            plugin_reports.append(PluginReport(plugin, skipped=found["supports"]))
            continue
        target = Target(op=op, plugin=plugin, device=device, dtype=dtype, shape=shape, params=dict(kwargs),
                        fingerprint=fp, source_hash=found["source_hash"], bucket=tuple(found["bucket"]),
                        flags=found["flags"], shape_text=found["shape_text"], config_space=found["config_space"],
                        default_config=found.get("default_config", {}),
                        seed_configs=tuple(found.get("seed_configs", ())),
                        only_configs=tuple(only[plugin]) if only is not None else None,
                        code_files=dict(found.get("code_files") or {}))
        label = f"{op} {dtype} {found['shape_text']} {plugin}"
        result = search(store, pool, target, options, lambda d, t, b, label=label: progress.update(label, d, t, b))
        plugin_reports.append(PluginReport(plugin, result))
    if report is None:
        reasons = "; ".join(f"{r.plugin}: {r.skipped}" for r in plugin_reports)
        raise UnsupportedError(f"{op}: no plugin could be asked about {dtype} {shape} on {device}: {reasons}")
    # The key's winners land together, after every plugin's search: a run stopped inside the key (a time limit,
    # say) stores none of them, and dispatch keeps using the nearest key whose plugins were all compared,
    # rather than the one or two plugins tuned before the stop. Their trials are stored as they run, so the
    # next run resumes each study and stores the key.
    label = f"{op} {dtype} {report.shape_text}"
    retimed, notes = retime_leaders(pool, [r.result for r in plugin_reports if r.result is not None], options)
    for note in notes:
        progress.note(f"{label} {note}")
    for r in plugin_reports:
        if r.result is not None and r.result.busy:
            progress.note(f"{label} {r.plugin}: {r.result.busy} trial(s) timed while the machine was busy were not "
                          "used; `kernelzoo tune` measures them again (best when the machine is idle)")
        winner = retimed.get(r.plugin, r.result.winner) if r.result is not None else None
        if winner is not None:
            records.save_winner(store, replace(winner, origin=origin))
    report.plugins = plugin_reports
    report.winner = _key_winner(store, report, fp)
    if report.winner is None:  # nothing current stored (a read-only store, say): this run's fastest
        winners = [r.result.winner for r in plugin_reports if r.result is not None and r.result.winner is not None]
        report.winner = pick_winner(winners, torch.device(device).type, op).plugin if winners else None
    return report


def _key_winner(store: Store, report: ShapeReport, fp: Fingerprint) -> str | None:
    """The plugin dispatch runs for the report's key: the pick among every current winner stored for it, those of
    plugins tuned earlier included (a run of ``--plugin cuda`` is compared with the Triton winner already there)."""
    rows = [w for w in records.winners(store, op=report.op, device_hash=fp.hash, dtype=report.dtype,
                                       flags=report.flags) if w.bucket == report.bucket]
    for winner, _current, _stale in by_key(rows):
        return winner.plugin if winner is not None else None
    return None
