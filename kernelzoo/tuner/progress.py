"""A progress line on stderr (no dependency): redrawn in place on a terminal, one line per study elsewhere."""

from __future__ import annotations

import sys
from typing import TextIO

WIDTH = 20


class Progress:
    """Shows ``label: [####....] 3/8 trials, best 0.812 ms`` while a study runs."""

    def __init__(self, stream: TextIO | None = None, enabled: bool = True) -> None:
        self.stream = stream or sys.stderr
        self.enabled = enabled
        self.tty = self.stream.isatty()
        self._width = 0

    def update(self, label: str, done: int, total: int, best_ms: float | None) -> None:
        """Redraw the line (on a terminal), or write it once the study is complete (elsewhere)."""
        if not self.enabled:
            return
        filled = WIDTH * done // max(total, 1)
        best = f", best {best_ms:.4g} ms" if best_ms is not None else ""
        line = f"{label}: [{'#' * filled}{'.' * (WIDTH - filled)}] {done}/{total} trials{best}"
        if self.tty:
            self.stream.write("\r" + line.ljust(self._width))
            self._width = len(line)
            if done >= total:
                self.stream.write("\n")
                self._width = 0
        elif done >= total:
            self.stream.write(line + "\n")
        self.stream.flush()

    def note(self, text: str) -> None:
        """A line of its own (a skipped plugin, a calibration)."""
        if not self.enabled:
            return
        if self.tty and self._width:
            self.stream.write("\n")
            self._width = 0
        self.stream.write(text + "\n")
        self.stream.flush()
