"""``kernelzoo tune --stale`` and ``--verify``: re-timing the configs records already name, not a search.

``--stale`` re-times, for each stale record of this device (its kernel's code changed since), the stale
winner's config under the new code, and stores the result as the key's current winner: minutes after
an edit rather than a full search, which a later ``tune`` continues from there (the measurements are
in the key's study). ``--verify`` re-times the top configs of each provisional record (a sibling
GPU's) on this GPU and stores the winner as this GPU's own, with origin ``verified``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

import torch
from sqlalchemy import select

from kernelzoo.db import lifecycle
from kernelzoo.db.models import DeviceModel, Origin, Outcome, TrialModel
from kernelzoo.db.records import Winner, winners
from kernelzoo.db.store import Store
from kernelzoo.errors import KernelzooError
from kernelzoo.fingerprint import Fingerprint
from kernelzoo.registry import registry
from kernelzoo.tuner.pool import WorkerLost, WorkerPool
from kernelzoo.tuner.progress import Progress
from kernelzoo.tuner.search import TuneOptions
from kernelzoo.tuner.tune import ShapeReport, device_fingerprint, tune_op

TOP = 3  # configs of a provisional key re-timed per plugin by --verify


def stale_records(store: Store, fp: Fingerprint, op: str | None = None,
                  plugins: Sequence[str] | None = None) -> list[Winner]:
    """This device's stale records (of ``op``, of ``plugins``) whose key has no current record of that plugin yet
    and whose config is still in the space."""
    rows = winners(store, op=op, device_hash=fp.hash)
    current = {(w.op, w.plugin, w.dtype, w.bucket, w.flags) for w in rows if lifecycle.is_current(w)}
    out = []
    for w in rows:
        if not lifecycle.is_stale(w) or (plugins and w.plugin not in plugins):
            continue
        if (w.op, w.plugin, w.dtype, w.bucket, w.flags) in current:
            continue
        if registry.impls[w.op][w.plugin].in_space(w.config):
            out.append(w)
    return out


def tune_stale(store: Store, pool: WorkerPool, *, device: str, op: str | None = None,
               plugins: Sequence[str] | None = None, options: TuneOptions | None = None,
               progress: Progress | None = None) -> list[ShapeReport]:
    """Re-time each stale winner's config under the installed code; its result is the key's current winner."""
    from kernelzoo.db.shipped import import_shipped

    progress = progress or Progress(enabled=False)
    fp = device_fingerprint(pool, device)
    import_shipped(store, fp)  # a shipped file's stale records of this GPU, on a database that has not read it yet
    rows = stale_records(store, fp, op, plugins)
    if rows:
        progress.note(f"re-timing {len(rows)} stale record(s): " + "; ".join(sorted(
            {f"{w.op}/{w.plugin} ({lifecycle.stale_reason(w)})" for w in rows})))
    return _retime(store, pool, device, fp, {w_key(w): [w.config] for w in rows}, rows, options, progress,
                   Origin.TUNED)


def tune_verify(store: Store, pool: WorkerPool, *, device: str, op: str | None = None,
                plugins: Sequence[str] | None = None, options: TuneOptions | None = None,
                progress: Progress | None = None, top: int = TOP) -> list[ShapeReport]:
    """Re-time the top configs of each provisional record on this device; store the winners as its own."""
    progress = progress or Progress(enabled=False)
    fp = device_fingerprint(pool, device)
    rows = [w for w in lifecycle.provisional_keys(store, fp, op) if not plugins or w.plugin in plugins]
    if rows:
        names = sorted({w.device.name for w in rows})
        progress.note(f"verifying {len(rows)} provisional record(s) tuned on {', '.join(names)}")
    configs = {w_key(w): top_configs(store, w, top) for w in rows}
    return _retime(store, pool, device, fp, configs, rows, options, progress, Origin.VERIFIED)


def w_key(w: Winner) -> tuple:
    return (w.op, w.plugin, w.dtype, w.bucket, w.flags)


def top_configs(store: Store, w: Winner, top: int) -> list[Mapping[str, Any]]:
    """The record's config, then the fastest other configs its device measured for the key with the same code
    (from the stored trials; a shipped record brings its winner alone), ``top`` at most, each in the space."""
    impl = registry.impls[w.op][w.plugin]

    def read(session: Any) -> list[TrialModel]:
        return list(session.scalars(select(TrialModel).join(DeviceModel).where(
            DeviceModel.fingerprint_hash == w.device.hash, TrialModel.op == w.op, TrialModel.plugin == w.plugin,
            TrialModel.shape == w.shape, TrialModel.outcome == Outcome.OK,
            TrialModel.study_name.contains(f":{w.source_hash}:")).order_by(TrialModel.time_ms)))

    out = [dict(w.config)]
    for row in store.transaction(read):
        config = dict(row.config)
        if len(out) >= top:
            break
        if config not in out and impl.in_space(config):
            out.append(config)
    return out[:top]


def _retime(store: Store, pool: WorkerPool, device: str, fp: Fingerprint,
            configs: Mapping[tuple, Sequence[Mapping[str, Any]]], rows: Sequence[Winner],
            options: TuneOptions | None, progress: Progress, origin: Origin) -> list[ShapeReport]:
    """Measure ``configs`` per record key, one tune_op per call (op, dtype, shape, arguments)."""
    calls: dict[tuple, dict[str, list[Mapping[str, Any]]]] = {}
    first: dict[tuple, Winner] = {}
    for w in rows:
        params = _params_for(pool, device, w)
        if params is None:
            progress.note(f"skipped {w.op}/{w.plugin} {w.dtype} {w.shape} [{w.flags}]: no call arguments of the op "
                          "give this key's flags; tune it with `kernelzoo tune`")
            continue
        call = (w.op, w.dtype, w.shape, json.dumps(params, sort_keys=True))
        calls.setdefault(call, {})[w.plugin] = list(configs[w_key(w)])
        first.setdefault(call, w)
    reports: list[ShapeReport] = []
    for (op, dtype, shape, params), only in calls.items():
        spec = registry.op(op)
        try:
            reports += tune_op(store, pool, op, device=device, shapes=[spec.parse_shape(shape)], dtypes=[dtype],
                               params=[json.loads(params)], options=options, progress=progress, only=only,
                               origin=origin, fp=fp)
        except KernelzooError as exc:
            progress.note(f"skipped {op} {dtype} {shape} on {torch.device(device).type}: {exc}")
    return reports


def _params_for(pool: WorkerPool, device: str, w: Winner) -> Mapping[str, Any] | None:
    """The call arguments of ``w``'s key: as recorded, else the first of the op's variants, each also with the
    key's flag words as true keywords (``causal`` -> ``causal=True``), whose call has the key's flags and bucket
    (asked of the plugin's worker)."""
    if w.params is not None:
        return w.params
    spec = registry.op(w.op)
    variants = list(getattr(spec, "variants", None) or ({},))
    if len(variants) == 1 and not w.flags:
        return variants[0]
    words = [f for f in w.flags.split("-") if f.isidentifier()]
    candidates = variants + [{**v, **dict.fromkeys(words, True)} for v in variants if words]
    shape = list(spec.parse_shape(w.shape))
    for variant in candidates:
        try:
            found = pool.request(w.plugin, device, {"cmd": "describe", "op": w.op, "plugin": w.plugin,
                                                    "device": device, "dtype": w.dtype, "shape": shape,
                                                    "params": dict(variant)}, timeout=120.0)
        except WorkerLost:
            return None
        if found.get("ok") and found["flags"] == w.flags and tuple(found["bucket"]) == w.bucket:
            return variant
    return None
