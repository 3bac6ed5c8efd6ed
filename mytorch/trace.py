"""``mytorch.trace()``: which kernelzoo op ran on which plugin, how often, and for how long."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass, field

from kernelzoo import dispatch
from kernelzoo.registry import Call, Op


@dataclass
class Entry:
    op: str
    plugin: str
    device: str
    dtype: str
    calls: int = 0
    seconds: float = 0.0


@dataclass
class Trace:
    """What ran inside a ``with mytorch.trace()`` block, grouped by (op, plugin, device, dtype)."""

    entries: dict[tuple[str, str, str, str], Entry] = field(default_factory=dict)

    def record(self, op: Op, call: Call, choice: dispatch.Choice, seconds: float) -> None:
        key = (op.name, choice.plugin, call.device.type, str(call.dtype).removeprefix("torch."))
        entry = self.entries.setdefault(key, Entry(*key))
        entry.calls += 1
        entry.seconds += seconds

    @property
    def total_seconds(self) -> float:
        return sum(e.seconds for e in self.entries.values())

    def table(self) -> str:
        """One line per (op, plugin, device, dtype), the most time first."""
        rows = sorted(self.entries.values(), key=lambda e: -e.seconds)
        total = self.total_seconds or 1.0
        lines = [f"{'op':<24}{'plugin':<8}{'device':<7}{'dtype':<10}{'calls':>7}{'total ms':>11}"
                 f"{'mean us':>10}{'share':>7}"]
        for e in rows:
            lines.append(f"{e.op:<24}{e.plugin:<8}{e.device:<7}{e.dtype:<10}{e.calls:>7}{e.seconds * 1e3:>11.2f}"
                         f"{e.seconds / e.calls * 1e6:>10.1f}{e.seconds / total:>7.1%}")
        lines.append(f"{'total':<49}{sum(e.calls for e in rows):>7}{self.total_seconds * 1e3:>11.2f}")
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.table()


@contextlib.contextmanager
def trace(print_table: bool = True) -> Iterator[Trace]:
    """Record every kernelzoo op run inside the block (each timed between device synchronisations,
    so the block runs slower than it would untraced); print the table at the end unless told not to."""
    recorded = Trace()
    with dispatch.observe(recorded.record):
        yield recorded
    if print_table:
        print(recorded.table())
