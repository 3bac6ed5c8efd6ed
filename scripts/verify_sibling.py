"""How a sibling GPU fares with a shipped file: ``tune --verify`` of its records relabelled as another GPU's.

    python scripts/verify_sibling.py --op attention                  # tuning_db/h200.json, on this GPU
    python scripts/verify_sibling.py --op attention --budget 5m --keep-cache

The records of FILE (of the ops asked for) are written, in a temporary directory, as if tuned on a sibling of
this GPU: another name, four more SMs, the same compute capability. The shipped files are then that one alone
and the tuning database a fresh one, so every key of FILE is provisional here, as on a GPU with no file of
its own. ``kernelzoo tune --verify`` runs over them as the command does (its default trials and timing) and
this prints the keys, the configs timed (checked against the float64 reference, and the leaders' unchecked
re-times), how many keys became this GPU's own and the wall seconds. Compiled kernels go to a
fresh cache too (a new machine's cold start) unless ``--keep-cache``. Exit status 1 if a key was left
provisional.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent


def relabel(source: Path, directory: Path, here: Any, ops: list[str] | None) -> Any:
    """``source``'s records (of ``ops``) written to ``directory/sibling.json`` as a sibling of ``here``'s; the
    sibling's fingerprint."""
    data = json.loads(source.read_text())
    sibling = replace(here, name=f"NVIDIA sibling of {here.name}", sm_count=here.sm_count + 4)
    data["records"] = [{**r, "device": sibling.to_dict(), "device_hash": sibling.hash}
                       for r in data["records"] if not ops or r["op"] in ops]
    (directory / "sibling.json").write_text(json.dumps(data))
    return sibling


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--op", action="append", help="only this op's records (repeatable; default: every op)")
    parser.add_argument("--file", type=Path, default=ROOT / "tuning_db" / "h200.json", help="the shipped file")
    parser.add_argument("--device", default="cuda", help="the device to verify on (default cuda)")
    parser.add_argument("--budget", help="stop starting keys after this long (600, 90s, 5m)")
    parser.add_argument("--budget-ms", type=float, default=200.0, help="measuring time per trial (default 200)")
    parser.add_argument("--keep-cache", action="store_true", help="use the compiled kernels already cached")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="kz-sibling-") as tmp:
        tmp_path = Path(tmp)
        os.environ["KERNELZOO_DB"] = f"sqlite:///{tmp_path / 'tuning.sqlite'}"
        if not args.keep_cache:  # the workers inherit these: a cold start, as on a new machine
            os.environ["KERNELZOO_CACHE_DIR"] = str(tmp_path / "cache")
            os.environ["TRITON_CACHE_DIR"] = str(tmp_path / "triton")
        return verify(args, tmp_path)


def verify(args: argparse.Namespace, tmp_path: Path) -> int:
    from kernelzoo.db import lifecycle, shipped
    from kernelzoo.db.models import Origin
    from kernelzoo.db.records import winners
    from kernelzoo.db.store import open_store
    from kernelzoo.registry import registry
    from kernelzoo.tuner import retime
    from kernelzoo.tuner.jobs import parse_duration
    from kernelzoo.tuner.pool import TrialResult, WorkerPool
    from kernelzoo.tuner.progress import Progress
    from kernelzoo.tuner.search import TuneOptions
    from kernelzoo.tuner.tune import device_fingerprint

    class Counting(WorkerPool):
        checked = unchecked = 0

        def trial(self, plugin: str, device: str, msg: dict) -> TrialResult:
            if msg.get("check", True):
                self.checked += 1
            else:
                self.unchecked += 1
            return super().trial(plugin, device, msg)

    registry.load()
    files = tmp_path / "shipped"
    files.mkdir()
    shipped.shipped_dir = lambda: files  # the relabelled file alone: this GPU's own file would leave nothing to lend
    store = open_store(os.environ["KERNELZOO_DB"], write=True)
    options = TuneOptions(trials=20, budget_ms=args.budget_ms)  # as `kernelzoo tune --verify` runs
    start = time.monotonic()
    with Counting(options.timeout_s) as pool:
        here = device_fingerprint(pool, args.device)
        sibling = relabel(args.file, files, here, args.op)
        wanted = {retime.key_of(w) for w in lifecycle.provisional_keys(store, here)}
        print(f"verify_sibling: {len(wanted)} key(s) of {args.file.name} relabelled as {sibling.describe()}, "
              f"verified on {here.describe()}", file=sys.stderr)
        reports = []
        for op in args.op or [None]:
            reports += retime.tune_verify(store, pool, device=args.device, op=op, options=options,
                                          progress=Progress(), budget_s=parse_duration(args.budget)
                                          if args.budget else None)
        checked, unchecked = pool.checked, pool.unchecked
    wall = time.monotonic() - start
    own = {retime.key_of(w) for w in winners(store, device_hash=here.hash) if w.origin == Origin.VERIFIED}
    left = wanted - own
    print(f"verify_sibling: {len(reports)} key(s) re-timed, {checked} config(s) timed and checked, {unchecked} "
          f"leader re-time(s), {len(own & wanted)} of {len(wanted)} key(s) verified, {wall:.0f} s wall")
    for key in sorted(left):
        print(f"  still provisional: {' '.join(map(str, key))}")
    return 1 if left else 0


if __name__ == "__main__":
    raise SystemExit(main())
