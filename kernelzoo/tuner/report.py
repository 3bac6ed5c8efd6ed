"""The table ``kernelzoo tune`` prints per key: each plugin's best, its rate, % of the floor, ratio to torch."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

from kernelzoo.table import format_table
from kernelzoo.tuner.tune import ShapeReport

if TYPE_CHECKING:
    from kernelzoo.autotune import TuneReport

# a time below the floor: inputs held in a cache whose bandwidth the floor does not count (CPU), a float32 product
# on tensor cores (the float32 rate is cuBLAS's IEEE one), or ceilings that are too low (a calibration taken under load)
RECALIBRATE = ("a '!' marks a time under the floor: the inputs fit in a cache faster than the measured bandwidth, "
               "the kernel's float32 products ran on the tensor cores (a config's TF32X3), whose rate the float32 "
               "ceiling does not count, or the device's ceilings are too low (a calibration under load?); re-measure "
               "them with `kernelzoo bench --calibrate`")


def floor_pct(floor: float | None, ms: float) -> str:
    """``ms`` as % of the floor, marked '!' above 100 %."""
    if not floor or ms <= 0:
        return "-"
    pct = 100 * floor / ms
    return f"{pct:.0f}%" + ("!" if pct > 100 else "")


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
            floor_pct(floor, w.time_ms),
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
        if any(floor_pct(floor, w.time_ms).endswith("!") for w in best.values()):
            lines.append(RECALIBRATE)
    lines.append(f"winner: {report.winner} (stored; dispatch runs it for this key)" if report.winner
                 else "winner: none (no plugin produced a verified config)")
    return "\n".join(lines + notes)


def format_summary(report: TuneReport) -> str:
    """One row per key: its winner, time, noise, ratio to torch and % of the floor; then what was skipped."""
    rows, over = [], False
    for r in report.keys:
        floor = r.ceilings.floor_ms(r.flops, r.bytes, r.dtype) if r.ceilings else None
        best = {p.plugin: p.result.winner for p in r.plugins if p.result is not None and p.result.winner}
        w = best.get(r.winner) if r.winner else None
        label = r.winner
        if w is None and r.winner and best:  # the key's winner was not timed now (--stale, --verify of one plugin):
            timed, w = min(best.items(), key=lambda item: item[1].time_ms)  # the fastest of those that were
            label = f"{timed} (key: {r.winner})"
        torch_ms = best["torch"].time_ms if "torch" in best else None
        pct = floor_pct(floor, w.time_ms) if w else "-"
        key = f"{r.op} {r.dtype} {r.shape_text}" + (f" {r.flags}" if r.flags else "")
        over = over or pct.endswith("!")
        if w is None:
            why = "; ".join(f"{p.plugin}: {p.skipped or 'no verified config'}" for p in r.plugins)
            rows.append((key, "none", "-", "-", "-", "-", why[:100]))
            continue
        rows.append((key, label, f"{w.time_ms:.4g}",
                     f"{100 * w.spread:.1f}%", f"{torch_ms / w.time_ms:.2f}x" if torch_ms else "-", pct,
                     json.dumps(dict(w.config)) if w.config else "-"))
    lines = []
    if rows:
        device = " and ".join(dict.fromkeys(r.fingerprint.describe() for r in report.keys))
        lines.append(format_table(("key", "winner", "ms", "noise", "vs torch", "% floor", "config / why none"), rows,
                                  title=f"tuned on {device}: {len(rows)} key(s)"))
    sources = {r.ceilings.source for r in report.keys if r.ceilings is not None}
    lines += [f"ceilings: {source}" for source in sorted(sources) if "under load" in source]
    if over:
        lines.append(RECALIBRATE)
    from kernelzoo.calibrate import load_note

    if note := load_note(report.load, report.cores):
        lines.append(f"note: {note}")
    lines += [f"skipped {key}: {why}" for key, why in report.skipped]
    if report.not_started:
        lines.append(f"the time budget left {len(report.not_started)} key(s) untouched: "
                     + ", ".join(report.not_started[:5]) + (" ..." if len(report.not_started) > 5 else ""))
    untuned = len(report.untuned) + len(report.skipped)
    lines.append(f"{len(report.keys) - len(report.untuned)} key(s) with a verified winner, {untuned} without"
                 f" ({report.seconds:.0f} s)" if report.keys or report.skipped else "nothing to tune")
    return "\n".join(lines)
