"""The job system's cost on one GPU: ``kernelzoo tune --devices 0`` against the single-process ``kernelzoo tune``
of the same keys, trials and seed, each into a new database, in one run.

    python scripts/fleet_overhead.py --op softmax --op layer_norm [--dtype float32] [--trials 20] [--limit 1.05]

A first single-process run warms the compile caches (NVRTC, Triton, OpenMP) and is not counted; then the two
ways run in turn, --rounds times, and the medians of their wall times are compared. Exits 1 when the job
system's median exceeds the single process's by more than --limit (1.05: 5 %). Prints one JSON line.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def timed(args: list[str], db: Path) -> float:
    started = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "kernelzoo.cli", "tune", *args, "--quiet", "--db",
                           f"sqlite:///{db}"], capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit(f"kernelzoo tune {' '.join(args)} failed ({done.returncode}):\n{done.stderr[-4000:]}")
    return time.perf_counter() - started


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--op", action="append", required=True, help="an op to tune (repeatable)")
    p.add_argument("--dtype", action="append", default=[], help="only this dtype (repeatable; default: tune's)")
    p.add_argument("--trials", type=int, default=20)
    p.add_argument("--rounds", type=int, default=1, help="runs of each way after the warm-up (default 1)")
    p.add_argument("--limit", type=float, default=1.05, help="largest ratio fleet / single allowed (default 1.05)")
    args = p.parse_args()
    tune = [a for op in args.op for a in ("--op", op)] + [a for d in args.dtype for a in ("--dtype", d)]
    tune += ["--trials", str(args.trials)]
    ways = {"single": [*tune, "--device", "cuda"], "fleet": [*tune, "--devices", "0"]}
    times: dict[str, list[float]] = {name: [] for name in ways}
    with tempfile.TemporaryDirectory() as tmp:
        timed(ways["single"], Path(tmp) / "warmup.sqlite")
        for r in range(args.rounds):
            for name, way in ways.items():
                times[name].append(timed(way, Path(tmp) / f"{name}-{r}.sqlite"))
    single, fleet = statistics.median(times["single"]), statistics.median(times["fleet"])
    print(json.dumps({"ops": args.op, "trials": args.trials, "single_s": times["single"], "fleet_s": times["fleet"],
                      "ratio": fleet / single, "limit": args.limit}))
    return 0 if fleet / single <= args.limit else 1


if __name__ == "__main__":
    sys.exit(main())
