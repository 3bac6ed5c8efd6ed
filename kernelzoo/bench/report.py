"""``kernelzoo bench``'s text table per group, in the style of ``kernelzoo tune``'s report, and its JSON file."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from kernelzoo.bench.run import Row
from kernelzoo.table import format_table

HEADERS = ("plugin", "ms", "noise", "TFLOP/s", "GB/s", "% floor", "vs torch", "host µs", "config")


def _num(value: float | None, fmt: str) -> str:
    return "-" if value is None else format(value, fmt)


def cells(row: Row) -> list[str]:
    """The row's table cells (HEADERS); the plugin dispatch would choose is starred."""
    config = f"{json.dumps(row.config)} ({row.config_origin})" if row.config else "-"
    return [row.plugin + (" *" if row.plugin == row.dispatch else ""),
            _num(row.median_ms, ".4g"), _num(None if row.spread is None else 100 * row.spread, ".1f") + "%",
            _num(row.tflops, ".3g"), _num(row.gbs, ".4g"),
            _num(row.pct_of_floor, ".0f") + "%", _num(row.vs_torch, ".2f") + "x",
            _num(None if row.host_ms is None else 1e3 * row.host_ms, ".3g"), config]


def format_group(rows: Sequence[Row], device: str, ceilings: Mapping[str, Any] | None) -> str:
    """A titled table of a group's timed plugins, then the floor, dispatch's choice and the skipped plugins."""
    first = rows[0]
    variant = " ".join(f"{k}={v}" for k, v in first.params.items())
    title = " ".join(filter(None, (first.op, first.dtype, first.label, variant, "on", device)))
    timed = [r for r in rows if r.status == "ok"]
    lines = [format_table(HEADERS, [cells(r) for r in timed], title=title) if timed else f"{title}\n(nothing timed)"]
    if first.floor_ms and ceilings:
        lines.append(f"floor {first.floor_ms:.4g} ms = max(FLOPs / peak, bytes / {ceilings['bandwidth_gbs']:.4g} "
                     f"GB/s), {first.bound}-bound; {ceilings['source']}")
    if first.dispatch:
        lines.append(f"dispatch: {first.dispatch} * ({first.dispatch_reason})")
    lines += [f"  {r.plugin}: {r.status}: {r.reason}" for r in rows if r.status != "ok"]
    return "\n".join(lines)


def write_json(path: str | Path, meta: Mapping[str, Any], rows: Sequence[Row]) -> None:
    """``{"meta": {...}, "rows": [...]}``: the command's every row (Row's fields), and where they were measured."""
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    Path(path).write_text(json.dumps({"meta": dict(meta), "rows": [r.to_dict() for r in rows]}, indent=1) + "\n")


def read_json(path: str | Path) -> tuple[dict[str, Any], list[Row]]:
    """The meta and rows of a file :func:`write_json` wrote."""
    data = json.loads(Path(path).read_text())
    return data["meta"], [Row(**r) for r in data["rows"]]
