"""A record's place in its life: current, stale, provisional, verified.

- **current**: the kernel's code is the one it was measured on (the code hash) and its config is in the
  plugin's config space. Dispatch runs it.
- **stale**: the code changed since. The record is kept, never run as tuned, and names the file that
  changed; ``kernelzoo tune --stale`` re-times its config first.
- **provisional**: this GPU has no current record of a key, and a sibling GPU does: the same compute
  capability and the same code, the nearest by SM count, then by memory bandwidth, from the user's
  database or the shipped files. Dispatch runs it, labelled with the GPU it was tuned on, until
  ``kernelzoo tune --verify`` re-times its top configs here.
- **verified**: the winner of such a re-timing, stored as this GPU's own (origin ``verified``).

A record whose config left the space is not current either; it is dropped by ``kernelzoo db prune``.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from kernelzoo.fingerprint import Fingerprint
from kernelzoo.registry import registry

if TYPE_CHECKING:
    from kernelzoo.db.records import Winner
    from kernelzoo.db.store import Store


def stale_reason(w: Winner) -> str | None:
    """None if ``w`` is current for the installed code, else why not: which file changed, or the config left the
    space, or the plugin is gone."""
    impl = registry.load().impls.get(w.op, {}).get(w.plugin)
    if impl is None:
        return f"plugin {w.plugin} of {w.op} is not installed"
    if impl.source_hash != w.source_hash:
        if not w.code_files:
            return "its code changed since it was tuned (the record predates per-file hashes)"
        names = sorted(set(impl.code_files) | set(w.code_files))
        changed = [n for n in names if impl.code_files.get(n) != w.code_files.get(n)]
        return f"{', '.join(changed)} changed since it was tuned"
    if not impl.in_space(w.config):
        return f"its config {json.dumps(dict(w.config), sort_keys=True, default=repr)} is no longer in the space"
    return None


def is_current(w: Winner) -> bool:
    """The code hash matches the installed implementation and the config is in its space."""
    return registry.is_current(w.op, w.plugin, w.source_hash, w.config)


def is_stale(w: Winner) -> bool:
    """Measured on code that has since changed (an installed plugin): re-timed by ``tune --stale``."""
    impl = registry.load().impls.get(w.op, {}).get(w.plugin)
    return impl is not None and impl.source_hash != w.source_hash


def can_borrow(here: Fingerprint, there: Fingerprint) -> bool:
    """Whether ``there``'s records may stand in for ``here``'s: another device of the same kind and the same
    (known) compute capability. Never across compute capabilities, never between CPUs."""
    return (there.hash != here.hash and there.kind == here.kind and bool(here.capability)
            and there.capability == here.capability)


def bandwidth(fp: Fingerprint) -> float:
    """The device's memory bandwidth in GB/s from the built-in table, 0 when unknown."""
    from kernelzoo.ceilings import device_ceilings

    found = device_ceilings(fp)
    return found.bandwidth_gbs if found is not None else 0.0


def distance(here: Fingerprint, there: Fingerprint) -> tuple[float, float, str]:
    """How far ``there`` is from ``here``: SM count first, then memory bandwidth, then the name (a fixed order)."""
    return (abs(there.sm_count - here.sm_count), abs(bandwidth(there) - bandwidth(here)), there.hash)


def borrow(here: Fingerprint, own: Sequence[Winner], others: Iterable[Winner]) -> list[Winner]:
    """Provisional records for ``here``: for each bucket without a current record in ``own``, the current
    records of that bucket from the nearest device that :func:`can_borrow` from and has any."""
    covered = {w.bucket for w in own if is_current(w)}
    by_bucket: dict[tuple[int, ...], list[Winner]] = {}
    for w in others:
        if w.bucket not in covered and can_borrow(here, w.device) and is_current(w):
            by_bucket.setdefault(w.bucket, []).append(w)
    out: list[Winner] = []
    for rows in by_bucket.values():
        nearest = min((w.device for w in rows), key=lambda fp: distance(here, fp))
        seen = set()
        for w in rows:
            if w.device.hash == nearest.hash and w.plugin not in seen:
                seen.add(w.plugin)
                out.append(w)
    return out


@functools.cache
def _shipped_records(path: Path, mtime: float) -> tuple[Winner, ...]:
    from kernelzoo.db.transfer import read_file

    return tuple(read_file(path))


def shipped_records(op: str | None = None) -> list[Winner]:
    """Every record of the shipped files (of ``op``), read once per process and file version; unreadable files
    are left out (``kernelzoo doctor`` reports them)."""
    from kernelzoo.db.shipped import shipped_files
    from kernelzoo.errors import KernelzooError

    out: list[Winner] = []
    for path in shipped_files():
        try:
            found = _shipped_records(path, path.stat().st_mtime)
        except (OSError, KernelzooError):
            continue
        out += [w for w in found if op is None or w.op == op]
    return out


def provisional_keys(store: Store, here: Fingerprint, op: str | None = None) -> list[Winner]:
    """Every provisional record for ``here`` (of ``op``): what ``tune --verify`` re-times."""
    from kernelzoo.db.records import winners

    stored, files = winners(store, op=op), shipped_records(op)
    # as dispatch reads them: this GPU's rows, and the shipped records of its hardware (whatever driver and
    # compiler versions measured them) are its own; the rest may lend
    own = [w for w in stored if w.device.hash == here.hash] + \
        [w for w in files if w.device.hardware_hash == here.hardware_hash]
    others = [w for w in stored if w.device.hash != here.hash] + \
        [w for w in files if w.device.hardware_hash != here.hardware_hash]
    groups: dict[tuple, list[Winner]] = {}
    for w in others:
        groups.setdefault((w.op, w.dtype, w.flags), []).append(w)
    out = []
    for (o, dtype, flags), group in sorted(groups.items()):
        mine = [w for w in own if (w.op, w.dtype, w.flags) == (o, dtype, flags)]
        out += borrow(here, mine, group)
    return out


def label(w: Winner, here: Fingerprint, reason: str) -> str:
    """``reason`` for a record chosen for ``here``: 'provisional (tuned on NVIDIA H200), ...' when borrowed."""
    if w.device.hash == here.hash:
        return reason
    return f"provisional (tuned on {w.device.name}), {reason.removeprefix('tuned ').strip('()')}"


def stale_note(rows: Iterable[Winner], bucket: tuple[int, ...]) -> str:
    """'stale: triton (kernelzoo_plugins/x/triton.py changed since it was tuned)' for the stale records of
    ``bucket`` whose plugin has no current record there yet, empty if there are none."""
    rows = [w for w in rows if w.bucket == bucket]
    retimed = {(w.plugin, w.device.hash) for w in rows if is_current(w)}
    notes = []
    for w in rows:
        if is_stale(w) and (w.plugin, w.device.hash) not in retimed:
            notes.append(f"{w.plugin} ({stale_reason(w)})")
    return f"stale: {'; '.join(notes)}; `kernelzoo tune --stale` re-times them" if notes else ""
