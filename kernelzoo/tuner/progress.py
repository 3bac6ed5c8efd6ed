"""Progress of a run on stderr: on a terminal one overall bar with an ETA (tqdm) over every study (or other unit
of work) the run will do, elsewhere (a log, a pipe) a plain line per finished unit with the count and the time
left. ``kernelzoo tune`` counts studies, ``bench`` and ``demo`` their shapes and ops (:meth:`Progress.step`)."""

from __future__ import annotations

import sys
import time
from typing import Any, TextIO


def _duration(seconds: float) -> str:
    seconds = max(0, round(seconds))
    return f"{seconds // 60}m{seconds % 60:02d}s" if seconds >= 60 else f"{seconds}s"


class Progress:
    """Overall progress over ``plan(studies)`` studies (one per plugin and key); ``update`` is called per trial."""

    def __init__(self, stream: TextIO | None = None, enabled: bool = True, verbose: bool = False) -> None:
        self.stream = stream or sys.stderr
        self.enabled = enabled
        self.verbose = verbose
        self.tty = self.stream.isatty()
        self.total = 0
        self._done = 0.0  # studies of finished keys
        self._within: dict[str, float] = {}  # fraction done of each study of the current key
        self._bar: Any = None
        self._start = time.monotonic()

    def plan(self, studies: int, desc: str = "tuning", unit: str = "studies") -> None:
        """The run's size: ``studies`` searches (plugins × keys) in all, or other ``unit``s."""
        self.total = studies
        self._start = time.monotonic()
        if self.enabled and self.tty and studies:
            from tqdm import tqdm

            count = ("{n:.1f}" if unit == "studies" else "{n:.0f}") + "/{total} " + unit
            self._bar = tqdm(total=studies, desc=desc, file=self.stream, dynamic_ncols=True,
                             bar_format="{l_bar}{bar}| " + count + " [{elapsed}<{remaining}]{postfix}")

    def step(self, label: str) -> None:
        """One unit (not a study) has ended: ``label`` says which."""
        self._done += 1
        if not self.enabled:
            return
        if self._bar is not None:
            self._bar.n = self.done
            self._bar.set_postfix_str(label, refresh=True)
        else:
            self.stream.write(f"[{self.done:.0f}/{self.total}{self._eta()}] {label}\n")
            self.stream.flush()

    @property
    def done(self) -> float:
        return min(self._done + sum(self._within.values()), self.total or float("inf"))

    def _eta(self) -> str:
        done = self.done
        if not self.total or done <= 0:
            return ""
        elapsed = time.monotonic() - self._start
        return f", about {_duration(elapsed * (self.total - done) / done)} left"

    def update(self, label: str, done: int, total: int, best_ms: float | None) -> None:
        """Trial ``done`` of ``total`` of the study ``label`` ended (its best so far: ``best_ms``)."""
        if not self.enabled:
            return
        self._within[label] = done / max(total, 1)
        best = f", best {best_ms:.4g} ms" if best_ms is not None else ""
        if self._bar is not None:
            self._bar.n = self.done
            self._bar.set_postfix_str(f"{label} {done}/{total}{best}", refresh=True)
        elif done >= total:
            count = f"[{self.done:.0f}/{self.total}{self._eta()}] " if self.total else ""
            self.stream.write(f"{count}{label}: {done}/{total} trials{best}\n")
            self.stream.flush()

    def key_done(self, studies: int) -> None:
        """A key's ``studies`` searches have ended (searched, resumed as complete, or skipped)."""
        self._done += studies
        self._within.clear()
        if self._bar is not None:
            self._bar.n = self.done
            self._bar.refresh()

    def note(self, text: str, detail: bool = False, file: TextIO | None = None) -> None:
        """A line of its own (a skipped key, a calibration) on stderr, or on ``file`` (a result's table on stdout,
        which is written whether progress is shown or not); ``detail`` lines only when verbose."""
        if file is None and (not self.enabled or (detail and not self.verbose)):
            return
        out = file or self.stream
        if self._bar is not None:
            self._bar.write(text, file=out)
        else:
            out.write(text + "\n")
            out.flush()

    def close(self) -> None:
        if self._bar is not None:
            self._bar.n = self.total
            self._bar.close()
            self._bar = None
