"""The winner across plugins: the fastest, with ties inside measured noise broken by a fixed order.

Every process and every rank that reads one database picks the same winner, because the
choice depends only on the stored times and spreads and on :func:`dispatch.plugin_order`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from kernelzoo.dispatch import plugin_order
from kernelzoo.registry import Implementation, registry

if TYPE_CHECKING:
    from kernelzoo.db.records import Winner


class Timed(Protocol):
    plugin: str
    time_ms: float
    spread: float


C = TypeVar("C", bound=Timed)


def pick_winner(candidates: Sequence[C], device_type: str, op: str | None = None) -> C:
    """The fastest candidate, or the first in plugin order (``op``'s, where given) of those within noise of it.

    Within noise: slower than the fastest by less than the larger relative spread (IQR over
    median) of the two timings; such a difference is no difference (docs/perf/method.md).
    """
    order = plugin_order(device_type, [c.plugin for c in candidates], op)

    def rank(c: C) -> tuple[int, str]:
        return (order.index(c.plugin) if c.plugin in order else len(order), c.plugin)

    fastest = min(candidates, key=lambda c: (c.time_ms, rank(c)))
    tied = [c for c in candidates if c.time_ms <= fastest.time_ms * (1 + max(c.spread, fastest.spread))]
    return min(tied, key=rank)


def config_problem(impl: Implementation, config: Mapping[str, Any]) -> str | None:
    """What keeps a stored ``config`` from running on ``impl``, or None: every key must be one of its config
    space or its default config, every searched value one of the space's (a row is data: ``{"threads": 0}``
    must never reach a kernel)."""
    if not isinstance(config, Mapping):
        return f"the config is {type(config).__name__}, expected a mapping"
    unknown = sorted(str(k) for k in config if k not in impl.config_space and k not in impl.default_config)
    if unknown:
        return f"{', '.join(unknown)} not in {impl.op}/{impl.plugin}'s config space"
    for name, value in config.items():
        values = impl.config_space.get(name)
        try:
            outside = values is not None and value not in values
        except TypeError:  # a value that cannot be compared with the space's
            outside = True
        if outside:
            return f"{name}={value!r} is not in {impl.op}/{impl.plugin}'s space {list(values)}"
    return None


def by_key(rows: Sequence[Winner]) -> list[tuple[Winner | None, list[Winner], list[Winner]]]:
    """Per key (op, device, dtype, bucket, flags): the winner, the current candidates, the stale rows.

    Current: the plugin is registered, dispatch may choose it on that device kind, its kernel
    code is unchanged since it was tuned and its config is still in the space.
    """
    groups: dict[tuple, list[Winner]] = {}
    for w in rows:
        groups.setdefault((w.op, w.device.hash, w.dtype, w.bucket, w.flags), []).append(w)
    out = []
    for (op, *_), group in groups.items():
        impls = registry.impls.get(op, {})
        kind = group[0].device.kind
        allowed = set(plugin_order(kind, impls))
        current = [w for w in group
                   if w.plugin in allowed and registry.is_current(op, w.plugin, w.source_hash, w.config)
                   and config_problem(impls[w.plugin], w.config) is None]
        stale = [w for w in group if w not in current]
        out.append((pick_winner(current, kind, op) if current else None, current, stale))
    return out
