"""``kernelzoo tune --stale`` and ``--verify``: re-timing the configs records already name, not a search.

``--stale`` re-times, for each stale record of this device (its kernel's code changed since), the stale
winner's config under the new code, and stores the result as the key's current winner: minutes after
an edit rather than a full search, which a later ``tune`` continues from there (the measurements are
in the key's study). ``--verify`` re-times the top configs of each provisional key (a sibling GPU's
records) on this GPU and stores the winner as this GPU's own, with origin ``verified``.

Both time few configs of many keys, so what a key costs beyond its timings is cut: the configs are
compiled first by parallel workers (:mod:`kernelzoo.tuner.warm`), every key is timed in the same worker
per plugin, each config is checked against the reference once, and a key's two leaders are re-timed
only when they are close (:data:`CLEAR`).
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any, TextIO

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
from kernelzoo.tuner.tune import ShapeReport, device_fingerprint, plugins_for, tune_op
from kernelzoo.tuner.warm import warm

TOP = 3  # configs of a provisional key re-timed by --verify, over its plugins
WITHIN = 1.5  # --verify re-times the plugins whose borrowed record is within this factor of the key's fastest
# --stale and --verify re-time a key's two leaders again (interleaved) only when the second is within this
# fraction of the first: each config is measured once per key, and a wider gap is no clock or load drift
CLEAR = 0.15


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
               progress: Progress | None = None, budget_s: float | None = None,
               warmers: int | None = None) -> list[ShapeReport]:
    """Re-time each stale winner's config under the installed code; its result is the key's current winner.
    ``budget_s`` stops starting keys after that many seconds; a rerun re-times the rest. ``warmers`` workers
    compile the configs first, side by side (:mod:`kernelzoo.tuner.warm`; default: by the CPU count)."""
    from kernelzoo.db.shipped import import_shipped

    progress = progress or Progress(enabled=False)
    fp = device_fingerprint(pool, device)
    import_shipped(store, fp)  # a shipped file's stale records of this GPU, on a database that has not read it yet
    rows = stale_records(store, fp, op, plugins)
    if rows:
        progress.note(f"re-timing {len(rows)} stale record(s): " + "; ".join(sorted(
            {f"{w.op}/{w.plugin} ({lifecycle.stale_reason(w)})" for w in rows})))
    quick = replace(options or TuneOptions(), clear=CLEAR)
    return _retime(store, pool, device, fp, {w_key(w): [w.config] for w in rows}, rows, quick, progress,
                   Origin.TUNED, budget_s, warmers)


def tune_verify(store: Store, pool: WorkerPool, *, device: str, op: str | None = None,
                plugins: Sequence[str] | None = None, options: TuneOptions | None = None,
                progress: Progress | None = None, top: int = TOP, within: float = WITHIN,
                budget_s: float | None = None, warmers: int | None = None) -> list[ShapeReport]:
    """Re-time the top configs of each provisional key on this device; store the winners as its own.

    Per key, the plugins whose borrowed record is within ``within`` times the key's fastest are candidates (a
    plugin several times slower on the sibling does not win here), and of their configs (each record's, then
    the fastest others its device measured) ``top`` at most, taken round the plugins by their records' times.
    Plugins left out get no record of this GPU for the key: dispatch picks among the verified ones.
    ``budget_s`` stops starting keys after that many seconds; a rerun verifies the rest. ``warmers`` workers
    compile the configs first, side by side (:mod:`kernelzoo.tuner.warm`; default: by the CPU count)."""
    progress = progress or Progress(enabled=False)
    if op is not None:  # the plugins' workers import torch while the probe reports the device
        pool.start(plugins_for(op, device, plugins), device)
    fp = device_fingerprint(pool, device)
    rows = [w for w in lifecycle.provisional_keys(store, fp, op) if not plugins or w.plugin in plugins]
    if not rows:
        return []
    keys: dict[tuple, list[Winner]] = {}
    for w in rows:
        keys.setdefault(key_of(w), []).append(w)
    chosen: list[Winner] = []
    configs: dict[tuple, list[Mapping[str, Any]]] = {}
    for group in keys.values():
        picked = verify_configs(store, group, top, within)
        chosen += [w for w in group if w_key(w) in picked]
        configs.update(picked)
    names = sorted({w.device.name for w in rows})
    left_out = len(rows) - len(chosen)
    progress.note(f"verifying {len(keys)} provisional key(s) tuned on {', '.join(names)}: "
                  f"{sum(map(len, configs.values()))} config(s) of {len(chosen)} record(s)"
                  + (f"; {left_out} record(s) more than {within:g}x slower than their key's fastest left out"
                     if left_out else ""))
    quick = replace(options or TuneOptions(), clear=CLEAR)
    return _retime(store, pool, device, fp, configs, chosen, quick, progress, Origin.VERIFIED, budget_s,
                   warmers)


def key_of(w: Winner) -> tuple:
    """The dispatch key a record answers for: op, dtype, bucket and flags (every plugin's)."""
    return (w.op, w.dtype, w.bucket, w.flags)


def w_key(w: Winner) -> tuple:
    return (w.op, w.plugin, w.dtype, w.bucket, w.flags)


def verify_configs(store: Store, group: Sequence[Winner], top: int,
                   within: float) -> dict[tuple, list[Mapping[str, Any]]]:
    """The configs ``tune --verify`` re-times of one key's provisional records (one per plugin), by record: the
    plugins within ``within`` times the fastest record, ``top`` configs in all, each plugin's best first."""
    ranked = sorted(group, key=lambda w: (w.time_ms, w.plugin))
    kept = [w for w in ranked if w.time_ms <= ranked[0].time_ms * within]
    lists = {w_key(w): top_configs(store, w, top) for w in kept}
    picked: dict[tuple, list[Mapping[str, Any]]] = {}
    count = 0
    for rank in range(top):
        for w in kept:
            found = lists[w_key(w)]
            if rank < len(found) and count < top:
                picked.setdefault(w_key(w), []).append(found[rank])
                count += 1
    return picked


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
            options: TuneOptions | None, progress: Progress, origin: Origin,
            budget_s: float | None = None, warmers: int | None = None) -> list[ShapeReport]:
    """Measure ``configs`` per record key, one tune_op per call (op, dtype, shape, arguments), in the pool's
    workers (one per plugin, for every key: a kernel compiled for one key is not compiled again for the next),
    after ``warmers`` workers have compiled them side by side; a line of progress per key. Past ``budget_s``
    seconds no further key is started."""
    start = time.monotonic()
    calls: dict[tuple, dict[str, list[Mapping[str, Any]]]] = {}
    found_params: dict[tuple, Mapping[str, Any] | None] = {}
    for w in rows:
        asked = (w.op, w.dtype, w.shape, w.bucket, w.flags)
        if asked not in found_params:  # asked once per key, of the first of its plugins
            found_params[asked] = _params_for(pool, device, w)
        params = found_params[asked]
        if params is None:
            progress.note(f"skipped {w.op}/{w.plugin} {w.dtype} {w.shape} [{w.flags}]: no call arguments of the op "
                          "give this key's flags; tune it with `kernelzoo tune`")
            continue
        call = (w.op, w.dtype, w.shape, json.dumps(params, sort_keys=True))
        calls.setdefault(call, {})[w.plugin] = list(configs[w_key(w)])
    tasks = [{"op": op, "plugin": plugin, "device": device, "dtype": dtype,
              "shape": list(registry.op(op).parse_shape(shape)), "params": json.loads(params), "config": dict(config)}
             for (op, dtype, shape, params), only in calls.items() for plugin, listed in only.items()
             for config in listed]
    timeout_s = (options or TuneOptions()).timeout_s
    if tasks and warm(tasks, timeout_s, warmers):
        progress.note(f"compiled {len(tasks)} config(s) side by side in {time.monotonic() - start:.1f} s")
    reports: list[ShapeReport] = []
    progress.plan(len(calls), desc="re-timing", unit="keys")
    for n, ((op, dtype, shape, params), only) in enumerate(calls.items()):
        if budget_s is not None and time.monotonic() - start > budget_s:
            progress.note(f"the budget of {budget_s:g} s is spent: {len(calls) - n} key(s) left; run the command "
                          "again to re-time them")
            break
        spec = registry.op(op)
        began = time.monotonic()
        label = f"{op} {dtype} {shape}" + (f" {params}" if params != "{}" else "")
        try:
            found = tune_op(store, pool, op, device=device, shapes=[spec.parse_shape(shape)], dtypes=[dtype],
                            params=[json.loads(params)], options=options, progress=NotesOnly(progress),
                            only=only, origin=origin, fp=fp)
        except KernelzooError as exc:
            progress.note(f"skipped {op} {dtype} {shape} on {torch.device(device).type}: {exc}")
            progress.step(f"{label}: skipped")
            continue
        reports += found
        timed = sum(map(len, only.values()))
        winner = found[0].winner if found else None
        progress.step(f"{label}: {timed} config(s) of {', '.join(only)} in {time.monotonic() - began:.1f} s, "
                      f"winner {winner or 'none'}")
    progress.close()
    return reports


class NotesOnly(Progress):
    """A key's notes (a skipped plugin, a dropped leader) through ``outer``, not its studies' trial counts: a
    re-time's progress is counted in keys."""

    def __init__(self, outer: Progress) -> None:
        super().__init__(outer.stream, enabled=outer.enabled, verbose=outer.verbose)
        self.outer = outer

    def note(self, text: str, detail: bool = False, file: TextIO | None = None) -> None:
        self.outer.note(text, detail, file)

    def update(self, label: str, done: int, total: int, best_ms: float | None) -> None:
        return


def _params_for(pool: WorkerPool, device: str, w: Winner) -> Mapping[str, Any] | None:
    """The call arguments that rebuild ``w``'s key: the first of these whose call has the key's flags and bucket
    (asked of the plugin's worker), or None. The recorded ones first (a record may hold fewer than its call took:
    conv2d's geometry rides in its example shape), then each of the op's variants, alone, with the key's flag words
    (joined by ``-`` or ``,``) as true keywords (``causal`` -> ``causal=True``), and with the key's ``name=value``
    flags as keywords (``stride=2x2`` -> ``stride=[2, 2]``). A re-time is never stored under another key than its
    record's."""
    spec = registry.op(w.op)
    variants = list(getattr(spec, "variants", None) or ({},))
    words = [f for f in re.split("[-,]", w.flags) if f.isidentifier()]
    named = flag_keywords(w.flags)
    candidates = ([dict(w.params)] if w.params is not None else []) + variants
    # a word a variant already stands for (linear's "gelu": activation="gelu") is not a keyword of its own
    candidates += [{**v, **dict.fromkeys([f for f in words if f not in map(str, v.values())], True)}
                   for v in variants if words]
    candidates += [{**v, **named} for v in variants if named]
    shape = list(spec.parse_shape(w.shape))
    tried: list[Mapping[str, Any]] = []
    for variant in candidates:
        if variant in tried:
            continue
        tried.append(variant)
        try:
            found = pool.request(w.plugin, device, {"cmd": "describe", "op": w.op, "plugin": w.plugin,
                                                    "device": device, "dtype": w.dtype, "shape": shape,
                                                    "params": dict(variant)}, timeout=120.0)
        except WorkerLost:
            return None
        if found.get("ok") and found["flags"] == w.flags and tuple(found["bucket"]) == w.bucket:
            return variant
    return None


def flag_keywords(flags: str) -> dict[str, Any]:
    """The ``name=value`` words of a key's flags as keyword arguments: integers, ``AxB`` pairs as lists, other
    values as strings (``stride=2x2-padding=1x1`` -> ``{"stride": [2, 2], "padding": [1, 1]}``)."""
    out: dict[str, Any] = {}
    for word in flags.split("-"):
        name, eq, value = word.partition("=")
        if not eq or not name.isidentifier() or not value:
            continue
        parts = value.split("x")
        if all(part.isdigit() for part in parts):
            out[name] = [int(part) for part in parts] if len(parts) > 1 else int(parts[0])
        else:
            out[name] = value
    return out
