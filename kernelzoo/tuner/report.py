"""The table ``kernelzoo tune`` prints per key: each plugin's best, its rate, % of the floor, ratio to torch."""

from __future__ import annotations

import json

from kernelzoo.table import format_table
from kernelzoo.tuner.tune import ShapeReport


def _rate(amount: float, ms: float, unit: float) -> str:
    return f"{amount / (ms * 1e-3) / unit:.3g}" if amount > 0 and ms > 0 else "-"


def format_report(report: ShapeReport) -> str:
    """A titled table of the plugins, then the winner and why plugins were skipped or failed."""
    floor = report.ceilings.floor_ms(report.flops, report.bytes, report.dtype) if report.ceilings else None
    best = {p.plugin: p.result.winner for p in report.plugins if p.result is not None and p.result.winner}
    torch_ms = best["torch"].time_ms if "torch" in best else None
    rows, notes = [], []
    for p in report.plugins:
        if p.result is None:
            notes.append(f"  {p.plugin}: not tuned: {p.skipped}")
            continue
        failed = sum(p.result.failures.values())
        if failed:
            kinds = ", ".join(f"{n} {k}" for k, n in sorted(p.result.failures.items()))
            first = p.result.first_failure.splitlines()[0] if p.result.first_failure else ""
            notes.append(f"  {p.plugin}: {failed} failed trial(s) ({kinds}); first: {first[:200]}")
        w = best.get(p.plugin)
        if w is None:
            rows.append((p.plugin, "-", "-", "-", "-", "-", "-", f"0/{failed}", "no verified config"))
            continue
        rows.append((
            p.plugin + (" *" if p.plugin == report.winner else ""),
            f"{w.time_ms:.4g}",
            f"{100 * w.spread:.1f}%",
            _rate(report.flops, w.time_ms, 1e12),
            _rate(report.bytes, w.time_ms, 1e9),
            f"{100 * floor / w.time_ms:.0f}%" if floor else "-",
            f"{torch_ms / w.time_ms:.2f}x" if torch_ms else "-",
            f"{p.result.ok}/{p.result.ok + failed}",
            json.dumps(dict(w.config)) if w.config else "-",
        ))
    title = (f"{report.op} {report.dtype} {report.shape_text}{' ' + report.flags if report.flags else ''} on "
             f"{report.fingerprint.describe()} (bucket {report.bucket_text})")
    lines = [format_table(("plugin", "ms", "noise", "TFLOP/s", "GB/s", "% floor", "vs torch", "ok/trials", "config"),
                          rows, title=title)]
    if floor and report.ceilings is not None:
        lines.append(f"floor {floor:.4g} ms = max(FLOPs / peak, bytes / {report.ceilings.bandwidth_gbs:.4g} GB/s); "
                     f"{report.ceilings.source}")
    lines.append(f"winner: {report.winner} (stored; dispatch runs it for this key)" if report.winner
                 else "winner: none (no plugin produced a verified config)")
    return "\n".join(lines + notes)
