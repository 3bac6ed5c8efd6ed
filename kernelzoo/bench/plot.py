"""``kernelzoo bench --plot``: throughput against problem size, a line per plugin, a subplot per dtype.

Like Triton's perf_report plots, with the size on a log axis labelled by the shapes (as --shape
spells them), and the device's ceiling (peak rate or bandwidth) dashed. Compute-bound ops plot
TFLOP/s against GFLOP per call, the others GB/s against MB moved per call. Shapes of one size
(matmul's 16x1024x1024x1024 and 4096x4096x1024) are drawn 12% apart so each keeps its tick.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from kernelzoo.bench.run import Row


def axes_of(rows: Sequence[Row]) -> tuple[str, Callable[[Row], float | None], str, Callable[[Row], float]]:
    """(y label, y of a row, x label, x of a row): TFLOP/s if any of ``rows`` is compute-bound, else GB/s."""
    if any(r.bound == "compute" for r in rows):
        return "TFLOP/s", lambda r: r.tflops, "GFLOP per call", lambda r: r.flops / 1e9
    return "GB/s", lambda r: r.gbs, "MB moved per call (fewest bytes)", lambda r: r.bytes / 1e6


def _ceiling(ceilings: Mapping[str, Any] | None, y_label: str, dtype: str) -> float | None:
    if not ceilings:
        return None
    if y_label == "GB/s":
        return float(ceilings["bandwidth_gbs"])
    return ceilings["tflops"].get(dtype) or ceilings["tflops"].get("float32")


def _positions(sizes: Sequence[tuple[float, str]]) -> dict[str, float]:
    """Each shape's x: its size, times 1.12 for each shape of the same size placed before it."""
    where: dict[str, float] = {}
    placed: dict[float, int] = {}
    for size, shape in sorted(set(sizes)):
        if shape not in where:
            where[shape] = max(size, 1e-9) * 1.12 ** placed.get(size, 0)
            placed[size] = placed.get(size, 0) + 1
    return where


def plot(rows: Sequence[Row], meta: Mapping[str, Any], path: str | Path) -> None:
    """Write the PNG of ``rows`` (one op's) to ``path``."""
    import matplotlib

    matplotlib.use("Agg")  # files only: no display needed
    import matplotlib.pyplot as plt
    from matplotlib.ticker import NullLocator

    sized = [r for r in rows if r.flops or r.bytes]  # groups that had inputs
    dtypes = list(dict.fromkeys(r.dtype for r in sized)) or ["-"]
    fig, axes = plt.subplots(1, len(dtypes), figsize=(6.4 * len(dtypes), 4.8), squeeze=False)
    for ax, dtype in zip(axes[0], dtypes):
        mine = [r for r in sized if r.dtype == dtype]
        y_label, y_of, x_label, x_of = axes_of(mine)
        where = _positions([(x_of(r), r.shape) for r in mine])
        lines: dict[str, list[tuple[float, float]]] = {}
        for r in mine:
            if r.status == "ok" and y_of(r) is not None:
                variant = " ".join(f"{k}={v}" for k, v in r.params.items())
                lines.setdefault(f"{r.plugin} ({variant})" if variant else r.plugin, []).append(
                    (where[r.shape], y_of(r)))
        for name, points in lines.items():
            xs, ys = zip(*sorted(points))
            ax.plot(xs, ys, marker="o", label=name)
        ceiling = _ceiling(meta.get("ceilings"), y_label, dtype)
        if ceiling:
            ax.axhline(ceiling, linestyle="--", color="gray", label=f"ceiling {ceiling:.4g} {y_label}")
        if where:
            ax.set_xscale("log")
            ax.set_xticks(list(where.values()), list(where), rotation=30, ha="right", fontsize=7)
            ax.xaxis.set_minor_locator(NullLocator())
        ax.set_ylim(bottom=0)
        ax.set(xlabel=x_label, ylabel=y_label, title=dtype)
        ax.grid(alpha=0.3)
        if lines:
            ax.legend(fontsize=8)
    op = rows[0].op if rows else ""
    fig.suptitle(f"{op} on {meta.get('device', '?')}, {str(meta.get('date', ''))[:10]}")
    fig.tight_layout()
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
