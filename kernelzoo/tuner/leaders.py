"""Before a key's winners are stored: the two fastest plugins timed again, interleaved.

Each plugin's search times its configs at different moments; a clock or load drift between
them can rank two close plugins the wrong way round. The two fastest winners of a key are
therefore timed again in alternating order (A B B A ...), and each keeps the median of its
rounds. Their configs passed the check against the reference when they were measured, so the
re-times only time them. With ``TuneOptions.clear`` set, a key whose second is slower than its
first by more than that fraction (and their spreads) is not re-timed. A winner that fails its
re-time, or is timed under load (the pool has already waited and retried), is not stored: the
next ``kernelzoo tune`` measures its key again.
"""

from __future__ import annotations

import statistics
from dataclasses import replace

from kernelzoo.db.records import Winner
from kernelzoo.tuner.pool import WorkerPool
from kernelzoo.tuner.search import SearchResult, TuneOptions

ROUNDS = 2  # re-times of each of the two: A B, then B A


def retime_leaders(pool: WorkerPool, results: list[SearchResult],
                   options: TuneOptions) -> tuple[dict[str, Winner | None], list[str]]:
    """Re-time the two fastest winners of ``results`` (one key's searches) interleaved, unless neither search
    measured anything in this run. The winners to store instead of theirs, by plugin: each at the median of its
    rounds, or None where its re-time failed or was taken under load; and what was dropped and why, one line each."""
    ranked = sorted((r for r in results if r.winner is not None), key=lambda r: r.winner.time_ms)[:2]
    if len(ranked) < 2 or not any(r.measured for r in ranked) or clear(ranked[0].winner, ranked[1].winner, options):
        return {}, []
    times: dict[int, list[float]] = {id(r): [] for r in ranked}
    spreads: dict[int, list[float]] = {id(r): [] for r in ranked}
    dropped: dict[int, str] = {}
    for round_ in range(ROUNDS):
        for r in ranked if round_ % 2 == 0 else reversed(ranked):
            if id(r) in dropped:
                continue
            target, winner = r.target, r.winner
            result = pool.trial(target.plugin, target.device, {
                **target.request(), "config": dict(winner.config), "seed": options.seed * 1_000_003 + 999_983 + round_,
                "warmup": options.warmup, "budget_ms": options.budget_ms, "check": False})
            if result.busy:
                r.busy += 1
                dropped[id(r)] = f"timed while the machine was busy: {result.busy}"
            elif result.timing is None:
                dropped[id(r)] = f"its re-time failed: {result.outcome.value}: {result.message[:200]}"
            else:
                times[id(r)].append(result.timing.median_ms)
                spreads[id(r)].append(result.timing.spread)
    notes, found = [], {}
    for r in ranked:
        if id(r) in dropped:
            notes.append(f"{r.target.plugin}: not stored, {dropped[id(r)]}")
            found[r.target.plugin] = None
        else:
            found[r.target.plugin] = replace(r.winner, time_ms=statistics.median(times[id(r)]),
                                             spread=max(r.winner.spread, *spreads[id(r)]))
    return found, notes


def clear(first: Winner, second: Winner, options: TuneOptions) -> bool:
    """Whether ``first`` leads ``second`` by more than ``options.clear`` and both their spreads (never when
    ``clear`` is 0)."""
    margin = options.clear + first.spread + second.spread
    return options.clear > 0 and second.time_ms > first.time_ms * (1 + margin)
