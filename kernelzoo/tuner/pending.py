"""``kernelzoo tune --pending``: tune exactly the keys programs called without an exact tuned winner."""

from __future__ import annotations

from collections.abc import Sequence

import torch

from kernelzoo.db.records import forget_miss, missed_keys
from kernelzoo.db.store import Store
from kernelzoo.errors import KernelzooError
from kernelzoo.registry import registry
from kernelzoo.tuner.pool import WorkerPool
from kernelzoo.tuner.progress import Progress
from kernelzoo.tuner.search import TuneOptions
from kernelzoo.tuner.tune import ShapeReport, device_fingerprint, tune_op


def tune_pending(store: Store, pool: WorkerPool, *, device: str, op: str | None = None,
                 plugins: Sequence[str] | None = None, options: TuneOptions | None = None,
                 progress: Progress | None = None) -> list[ShapeReport]:
    """Tune each missed key of this device (of ``op``) at the shape a program called; forget it once tuned."""
    progress = progress or Progress(enabled=False)
    kind = torch.device(device).type
    fp = device_fingerprint(pool, device)
    reports = []
    for miss in missed_keys(store, fp.hash, op):
        if miss.op not in registry.load().ops:
            progress.note(f"skipped pending {miss.op} {miss.shape}: the op is not registered here")
            continue
        spec = registry.op(miss.op)
        try:
            found = tune_op(store, pool, miss.op, device=device, plugins=plugins, shapes=[spec.parse_shape(miss.shape)],
                            dtypes=[miss.dtype], params=[dict(miss.params)], options=options, progress=progress)
        except KernelzooError as exc:
            progress.note(f"skipped pending {miss.op} {miss.dtype} {miss.shape} on {kind}: {exc}")
            continue
        reports += found
        if any(r.winner is not None and r.bucket == miss.bucket and r.flags == miss.flags for r in found):
            forget_miss(store, miss)
        else:
            progress.note(f"{miss.op} {miss.dtype} {miss.shape}: still pending (no verified winner for its key; "
                          "Op.shape_string and Op.parse_shape must round-trip)")
    return reports
