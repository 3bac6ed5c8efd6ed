"""Compiling the configs a re-time will measure, side by side, before any is timed.

``tune --stale`` and ``--verify`` measure a few configs of many keys, and on a GPU each distinct
kernel is a compile of seconds (NVRTC, Triton) that the timing worker would otherwise do one after
another. Here extra workers run each config once, untimed, in parallel: the backends keep what they
compile in their caches on disk (kernelzoo's cubin cache, Triton's cache), where the timing workers
find it. Configs that share a plugin, dtype, call arguments and config go to the same warmer in turn,
so a kernel that does not depend on the shape is compiled once. Nothing is timed while warmers run.
A warm-up that fails is left to the timed trial, which records the failure.
"""

from __future__ import annotations

import os
import select
import time
from collections.abc import Mapping, Sequence
from typing import Any

from kernelzoo.tuner.pool import Worker, WorkerLost

WARMERS = 8  # the most warm-up workers: each imports torch and holds a device context


def plan(tasks: Sequence[Mapping[str, Any]], warmers: int) -> list[list[Mapping[str, Any]]]:
    """``tasks`` (warm requests) in at most ``warmers`` queues, those of one (plugin, dtype, params, config)
    in the same queue, the groups dealt out largest first to the shortest queue."""
    groups: dict[str, list[Mapping[str, Any]]] = {}
    for task in tasks:
        ident = repr((task["plugin"], task["op"], task["dtype"], sorted(task.get("params", {}).items()),
                      sorted(task["config"].items())))
        groups.setdefault(ident, []).append(task)
    queues: list[list[Mapping[str, Any]]] = [[] for _ in range(max(1, min(warmers, len(groups))))]
    for group in sorted(groups.values(), key=len, reverse=True):
        min(queues, key=len).extend(group)
    return [q for q in queues if q]


def warm(tasks: Sequence[Mapping[str, Any]], timeout_s: float, warmers: int | None = None) -> int:
    """Run every warm request of ``tasks`` once across fresh workers; how many ran without an error. A worker
    that dies or passes ``timeout_s`` on a task is dropped with the rest of its queue."""
    warmers = warmers if warmers is not None else min(WARMERS, max(1, (os.cpu_count() or 2) // 2))
    queues = plan(tasks, warmers)
    if len(queues) < 2:  # one queue is what the timing worker does anyway
        return 0
    workers = [Worker() for _ in queues]
    busy: dict[int, float] = {}  # worker index -> the deadline of its task
    done = 0
    try:
        while True:
            for i, queue in enumerate(queues):
                if i not in busy and queue:
                    try:
                        workers[i].send({"cmd": "warm", **queue.pop(0)})
                        busy[i] = time.monotonic() + timeout_s
                    except WorkerLost:
                        queue.clear()
            if not busy:
                return done
            soonest = min(busy.values()) - time.monotonic()
            ready, _, _ = select.select([workers[i].stdout for i in busy], [], [], max(soonest, 0.0))
            for i in list(busy):
                if workers[i].stdout in ready:
                    try:
                        reply = workers[i].read()
                    except WorkerLost:
                        queues[i].clear()
                        del busy[i]
                        continue
                    if reply is not None:
                        done += bool(reply.get("ok"))
                        del busy[i]
                        if reply.get("fatal"):
                            queues[i].clear()
                elif time.monotonic() > busy[i]:
                    workers[i].kill()
                    queues[i].clear()
                    del busy[i]
    finally:
        for worker in workers:
            worker.ask_to_exit()
        for worker in workers:
            worker.close()
