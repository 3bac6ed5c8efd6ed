"""One winner on every rank: load a snapshot of the winners, and check that every rank loaded the same one.

Ranks that dispatch different kernels for one call can deadlock collectives (a different config may take a
different path). Before training, each rank reads the same frozen view of the winners::

    kernelzoo.distributed.use_snapshot("winners.json")   # or KERNELZOO_DB=snapshot:winners.json
    kernelzoo.distributed.check_same_winners()          # raises on every rank, naming the ranks that differ
"""

from __future__ import annotations

import os
from collections import Counter
from pathlib import Path
from typing import Any

from kernelzoo import dispatch
from kernelzoo.db import default_url
from kernelzoo.db.snapshot import PREFIX, content_hash, load_snapshot, snapshot_path
from kernelzoo.errors import KernelzooError


class WinnersDiffer(KernelzooError, RuntimeError):
    """Ranks of one process group dispatch from different winners; ``ranks`` are those that differ."""

    def __init__(self, message: str, ranks: list[int]) -> None:
        super().__init__(message)
        self.ranks = ranks


def use_snapshot(path: str | Path) -> str:
    """Make dispatch read only the snapshot at ``path`` (in this process and the processes it starts, through
    ``KERNELZOO_DB``); its content hash. Raises ArgumentError if the file is not a snapshot."""
    snap = load_snapshot(path)
    os.environ["KERNELZOO_DB"] = f"{PREFIX}{Path(path).resolve()}"
    dispatch.clear_cache()
    return snap.hash


def winners_hash() -> str:
    """The content hash of the winners this process dispatches from: its snapshot's, else that of the current
    winners in its database (the hash ``kernelzoo db snapshot`` would write)."""
    url = default_url()
    path = snapshot_path(url)
    if path is not None:
        return load_snapshot(path).hash
    from kernelzoo.db.snapshot import snapshot_data
    from kernelzoo.db.store import open_store

    return content_hash(snapshot_data(open_store(url))["records"])


def _describe_here() -> dict[str, Any]:
    """What this rank reports: its winners' hash, or why it has none (never raised before the collective)."""
    url = default_url()
    source = str(snapshot_path(url) or url)
    try:
        return {"hash": winners_hash(), "source": source, "error": ""}
    except (KernelzooError, OSError) as exc:
        return {"hash": "", "source": source, "error": str(exc)}


def check_same_winners(group: Any = None) -> str:
    """Compare the winners' hash across the ``torch.distributed`` process ``group`` (default: the world); the
    common hash. Raises WinnersDiffer on every rank, naming the ranks that differ from the majority (from rank
    0's on a tie) and what each holds, when any rank's differs or could not be read."""
    import torch.distributed as dist

    if not dist.is_available() or not dist.is_initialized():
        raise KernelzooError("check_same_winners needs an initialised torch.distributed process group "
                             "(torch.distributed.init_process_group); none is")
    mine = _describe_here()
    size = dist.get_world_size(group)
    everyone: list[Any] = [None] * size
    dist.all_gather_object(everyone, mine, group=group)
    ranks = [dist.get_global_rank(group, i) if group is not None else i for i in range(size)]
    votes = Counter(e["hash"] for e in everyone if e["hash"])
    if votes:
        top = max(votes.values())
        common = next(e["hash"] for e in everyone if e["hash"] and votes[e["hash"]] == top)
    else:
        common = ""
    differ = [r for r, e in zip(ranks, everyone, strict=True) if not e["hash"] or e["hash"] != common]
    if not differ:
        return common
    lines = [f"rank {r}: " + (f"winners hash {e['hash'][:16]} from {e['source']}" if e["hash"]
                              else f"no winners: {e['error']}")
             for r, e in zip(ranks, everyone, strict=True) if r in differ]
    raise WinnersDiffer(
        f"ranks {', '.join(map(str, differ))} dispatch from other winners than the rest "
        f"({sum(1 for e in everyone if e['hash'] == common)} of {size} ranks hold hash {common[:16] or '-'}); "
        "load the same snapshot on every rank (kernelzoo db snapshot FILE, then KERNELZOO_DB=snapshot:FILE):\n  "
        + "\n  ".join(lines), differ)
