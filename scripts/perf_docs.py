"""Turn benchmark results into docs/perf: a page per op (its latest GPU and CPU tables and plots, with the
command, device, versions and date) and README.md (per op, the best kernelzoo plugin against torch).

    python scripts/perf_docs.py --gpu DIR      # import GPU results (scripts/gpu_bench.sh's archive, unpacked)
    python scripts/perf_docs.py --cpu DIR      # import CPU results (scripts/cpu_bench.sh)
    python scripts/perf_docs.py --summary DIR  # print a results folder's summary; write nothing

A results folder holds ``<op>.json`` (``kernelzoo bench --json``) and, optionally, ``<op>.png``,
``gelu_fusion.md`` (``examples/gelu_fusion.py --out``) and ``pytest_<op>.json`` (pytest
``--benchmark-json``). Imported files go to docs/perf/data/<gpu|cpu>/ and docs/perf/img/, and every page
is rebuilt from all that is there: importing GPU results keeps the CPU sections, and the other way round.
A paragraph written by hand for an op's section (what its figures need to be read right) lives in
docs/perf/notes/<op>-<gpu|cpu>.md and is put under the section's heading at each rebuild. With no option,
the pages are rebuilt from what is there.
"""

from __future__ import annotations

import argparse
import json
import math
import re
import shutil
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from kernelzoo.bench.plot import plot
from kernelzoo.bench.report import read_json
from kernelzoo.bench.run import Row
from kernelzoo.dispatch import plugin_order
from kernelzoo.table import format_markdown, format_table

DOCS = Path(__file__).resolve().parent.parent / "docs" / "perf"
KINDS = ("gpu", "cpu")
HEADERS = ("dtype", "shape", "plugin", "ms", "noise", "TFLOP/s", "GB/s", "% floor", "vs torch")
Results = dict[str, dict[str, tuple[dict[str, Any], list[Row]]]]  # kind -> op -> (meta, rows)


def import_results(src: Path, kind: str, docs: Path) -> list[str]:
    """Copy a results folder into docs/perf/data/<kind> and img/ (plots drawn from the JSON where missing)."""
    data, img = docs / "data" / kind, docs / "img"
    data.mkdir(parents=True, exist_ok=True)
    img.mkdir(parents=True, exist_ok=True)
    ops = []
    for path in sorted(src.glob("*.json")):
        if path.name.startswith("pytest_"):
            shutil.copyfile(path, data / path.name)
            continue
        meta, rows = read_json(path)
        op = path.stem
        shutil.copyfile(path, data / path.name)
        png = path.with_suffix(".png")
        if png.exists():
            shutil.copyfile(png, img / f"{op}-{kind}.png")
        else:
            plot(rows, meta, img / f"{op}-{kind}.png")
        ops.append(op)
    if (src / "gelu_fusion.md").exists():
        shutil.copyfile(src / "gelu_fusion.md", data / "gelu_fusion.md")
    return ops


def load(folder: Path) -> dict[str, tuple[dict[str, Any], list[Row]]]:
    """op -> (meta, rows) of the ``kernelzoo bench`` files in ``folder``."""
    found = {}
    for path in sorted(folder.glob("*.json")):
        if not path.name.startswith("pytest_"):
            found[path.stem] = read_json(path)
    return found


def _num(value: float | None, fmt: str, suffix: str = "") -> str:
    return "-" if value is None else format(value, fmt) + suffix


def _shape(row: Row) -> str:
    return " ".join([row.label, *(f"{k}={v}" for k, v in row.params.items())])


def best_vs_torch(rows: Sequence[Row]) -> tuple[str, float, float, float, int, int] | None:
    """The kernelzoo plugin with the best geometric-mean ratio to torch over the groups where both ran:
    (plugin, geometric mean, lowest, highest, groups where it is faster, groups)."""
    ratios: dict[str, list[float]] = {}
    for r in rows:
        if r.plugin != "torch" and r.vs_torch:
            ratios.setdefault(r.plugin, []).append(r.vs_torch)
    if not ratios:
        return None
    mean = {p: math.exp(sum(map(math.log, v)) / len(v)) for p, v in ratios.items()}
    best = max(mean, key=lambda p: (mean[p], len(ratios[p])))
    v = ratios[best]
    return best, mean[best], min(v), max(v), sum(x > 1 for x in v), len(v)


def _best_text(rows: Sequence[Row]) -> str:
    found = best_vs_torch(rows)
    if found is None:
        return "-"
    plugin, mean, lo, hi, faster, n = found
    return f"{plugin}: {mean:.2f}x ({lo:.2f}-{hi:.2f}x; faster in {faster}/{n})"


def picks(rows: Sequence[Row]) -> dict[tuple, tuple[str, str]]:
    """Per group, (the plugin the run's dispatch chose, the one ``kernelzoo.ops`` runs in this version): the
    same, except where the run's choice came from the untuned default order, which may have changed since
    (``Op.default_order``); then the first plugin timed in the group in this version's order."""
    timed: dict[tuple, list[str]] = {}
    first: dict[tuple, Row] = {}  # a group's rows share op, device and the run's dispatch
    for r in rows:
        if r.status == "ok":
            timed.setdefault(r.group, []).append(r.plugin)
        first.setdefault(r.group, r)
    found = {}
    for group, r in first.items():
        now = r.dispatch
        if r.dispatch_reason == "default order" and timed.get(group):
            now = plugin_order(r.device, timed[group], r.op)[0]
        found[group] = (r.dispatch, now)
    return found


def changed_picks(rows: Sequence[Row]) -> str | None:
    """A note where this version's default order runs another plugin than the measured run's dispatch did."""
    moved = sorted({(then, now) for then, now in picks(rows).values() if then != now})
    if not moved:
        return None
    pairs = ", ".join(f"{now} (the run's dispatch: {then})" for then, now in moved)
    return (f"Measured before the op's untuned order changed (`Op.default_order`): `*` marks what `kernelzoo.ops` "
            f"runs now without tuning data, {pairs}.")


def table(rows: Sequence[Row]) -> str:
    """Every timed row; the fastest of each group in bold, the plugin dispatch would choose starred."""
    chosen = {group: now for group, (_, now) in picks(rows).items()}
    fastest = {}
    for r in rows:
        if r.median_ms and (r.group not in fastest or r.median_ms < fastest[r.group]):
            fastest[r.group] = r.median_ms
    host = any(r.host_ms is not None for r in rows)  # GPU rows timed with the host's enqueue kept out
    cells = []
    for r in rows:
        if r.status != "ok":
            continue
        ms = f"{r.median_ms:.4g}"
        cells.append([r.dtype, _shape(r), r.plugin + (" *" if r.plugin == chosen.get(r.group) else ""),
                      f"**{ms}**" if r.median_ms == fastest.get(r.group) else ms,
                      _num(None if r.spread is None else 100 * r.spread, ".1f", "%"), _num(r.tflops, ".3g"),
                      _num(r.gbs, ".4g"), _num(r.pct_of_floor, ".0f", "%"), _num(r.vs_torch, ".2f", "x")]
                     + ([_num(None if r.host_ms is None else 1e3 * r.host_ms, ".3g")] if host else []))
    return format_markdown(HEADERS + (("host µs",) if host else ()), cells)


def not_timed(rows: Sequence[Row]) -> list[str]:
    """One line per plugin and reason it was skipped or failed, with how many groups."""
    counts: dict[tuple[str, str, str], int] = {}
    for r in rows:
        if r.status != "ok":
            # one line for every "one run takes 1234 ms, more than --max-run-ms 300"
            key = (r.plugin, r.status, re.sub(r"one run takes \S+ ms, more than", "one run takes more than", r.reason))
            counts[key] = counts.get(key, 0) + 1
    return [f"- {plugin} {status} ({n} case{'s' * (n > 1)}): {reason}" for (plugin, status, reason), n in
            sorted(counts.items())]


def _heading(kind: str, meta: dict[str, Any]) -> str:
    return f"GPU: {meta['device']}" if kind == "gpu" else f"CPU, {meta.get('cores', '?')} cores: {meta['device']}"


def _load_note(meta: dict[str, Any]) -> str:
    load, cores = meta.get("load") or [], meta.get("cores") or 1
    if not load:
        return ""
    busy = ": other work shared the machine, the figures are noisy" if max(load) > 0.5 * cores else ""
    return f"Load average (1 min) {' -> '.join(f'{x:.1f}' for x in load)} on {cores} cores{busy}."


def _provenance(meta: dict[str, Any]) -> str:
    versions = ", ".join(f"{k} {v}" for k, v in meta.get("versions", {}).items() if v)
    ceilings = meta.get("ceilings")
    floors = f"Floors from: {ceilings['source']}." if ceilings else "No ceilings: no floors."
    if meta.get("device_type") == "cpu":
        floors += " The floor counts memory bandwidth: inputs that fit in the CPU's caches can pass it."
    host = ("`ms` is GPU time: the GPU waits before each timed call until the host has enqueued it, and "
            "`host µs` is that host time per call (checks, allocation, launches), which a program pays "
            "when it is host-bound. " if rows_have_host(meta) else "")
    return (f"Measured {meta['date'][:10]} with `{meta['command']}`; {versions}. {floors} {_load_note(meta)} "
            f"{host}`ms` is the median, `noise` its interquartile range over it, `vs torch` torch's median over "
            "the plugin's (above 1: faster); `*` marks the plugin `kernelzoo.ops` would run, bold the fastest.")


def rows_have_host(meta: dict[str, Any]) -> bool:
    """Whether the bench that wrote ``meta`` kept the host's enqueue out of the GPU times (kernelzoo bench
    records it as meta["timing"])."""
    return meta.get("timing") == "gpu, host hidden"


def op_page(op: str, results: Results, pytest_notes: dict[tuple[str, str], str],
            hand_notes: dict[tuple[str, str], str] | None = None) -> str:
    """An op's page: per kind, its hand note (``hand_notes[(kind, op)]``), provenance, plot and table."""
    lines = [f"# {op}", "", "[All ops](README.md)", ""]
    for kind in KINDS:
        if op not in results.get(kind, {}):
            continue
        meta, rows = results[kind][op]
        lines += [f"## {_heading(kind, meta)}", ""]
        if hand_notes and (kind, op) in hand_notes:
            lines += [hand_notes[(kind, op)].strip(), ""]
        lines += [_provenance(meta), "", f"![{op} on the {kind.upper()}]"
                  f"(img/{op}-{kind}.png)", "", table(rows), ""]
        moved = changed_picks(rows)
        if moved:
            lines += [moved, ""]
        skipped = not_timed(rows)
        if skipped:
            lines += ["Not timed:", "", *skipped, ""]
        if (kind, op) in pytest_notes:
            lines += [pytest_notes[(kind, op)], ""]
    return "\n".join(lines)


def agreement(pytest_file: Path, rows: Sequence[Row]) -> str | None:
    """How pytest-benchmark's medians compare with ``kernelzoo bench``'s on the cases both ran."""
    by_id = {"-".join(filter(None, (r.op, r.plugin, r.dtype, r.shape, *(f"{k}={v}" for k, v in r.params.items())))):
             r.median_ms for r in rows if r.median_ms}
    ratios = []
    for bench in json.loads(pytest_file.read_text())["benchmarks"]:
        case = bench["name"].partition("[")[2].rstrip("]")
        if case in by_id:
            ratios.append(bench["stats"]["median"] * 1e3 / by_id[case])
    if not ratios:
        return None
    ratios.sort()
    return (f"pytest-benchmark (`{pytest_file.name}`) against `kernelzoo bench` on the {len(ratios)} cases both "
            f"timed, in separate processes: median ratio {ratios[len(ratios) // 2]:.3f}, from {ratios[0]:.3f} "
            f"to {ratios[-1]:.3f}.")


def readme(results: Results) -> str:
    ops = sorted({op for kind in results.values() for op in kind})
    lines = ["# Performance", "",
             "Per op, the kernelzoo plugin with the best geometric-mean speed against torch over the op's "
             "representative shapes and dtypes (`vs torch`: torch's median time over the plugin's; above 1 is "
             "faster), its range and in how many of them it beats torch. Pages per op hold the tables and plots. "
             "Rebuilt by `scripts/perf_docs.py` from `data/`; GPU figures come from `scripts/gpu_bench.sh`, CPU "
             "ones from `scripts/cpu_bench.sh`. The GELU fusion study: [gelu_fusion.md](gelu_fusion.md).", ""]
    for kind in KINDS:
        if results.get(kind):
            metas = sorted((meta for meta, _ in results[kind].values()), key=lambda meta: meta["date"])
            meta, dates = metas[-1], sorted({m["date"][:10] for m in metas})
            if len(dates) == 1:
                when, note = f"measured {dates[0]}", _load_note(meta)
            else:  # the ops' runs differ: the newest run's versions, each page its own run's details
                when = f"measured {dates[0]} to {dates[-1]} (each op's page: its run's date, versions and load)"
                note = ""
            lines.append(f"- {_heading(kind, meta)}, {when}; "
                         + ", ".join(f"{k} {v}" for k, v in meta.get("versions", {}).items() if v)
                         + f". {note}".rstrip(". ") + ".")
    cells = [[f"[{op}]({op}.md)", *(_best_text(results[k][op][1]) if op in results.get(k, {}) else "not measured"
                                    for k in KINDS)] for op in ops]
    lines += ["", format_markdown(("op", "GPU: best plugin vs torch", "CPU: best plugin vs torch"), cells), "",
              *STUDIES, ""]
    return "\n".join(lines)


# Pages written by hand, linked below the table.
STUDIES = [
    "How these figures are measured, and the devices' ceilings behind `% floor`: [method.md](method.md). What each "
    "kernel family tried and what won: the design notes on [flash attention](../design/flash-attention.md), "
    "[GEMM](../design/gemm.md), [row reductions](../design/rows.md), [elementwise ops](../design/elementwise.md) "
    "and [convolution](../design/conv.md).",
    "",
    "Against torch's SDPA backends per shape (FA2, cuDNN, memory-efficient), with the tuned dispatch: "
    "[attention-sdpa.md](attention-sdpa.md).",
    "",
    "mytorch's training step against torch eager and torch.compile, and how to measure it: [mytorch.md](mytorch.md). "
    "The host time of one op call against torch's own op, and where it goes: [call-path.md](call-path.md).",
]


def gelu_page(docs: Path) -> str | None:
    parts = [(kind, docs / "data" / kind / "gelu_fusion.md") for kind in KINDS]
    found = [(kind, p.read_text()) for kind, p in parts if p.exists()]
    if not found:
        return None
    intro = ("# GELU: the kernel-fusion study\n\n[All ops](README.md)\n\nGELU (tanh form) written as 9 separate "
             "torch ops reads and writes ~20 tensors; a fused kernel reads one and writes one, and can reach the "
             "floor: those bytes over the memory bandwidth. `examples/gelu_fusion.py` measures each variant.\n")
    return intro + "".join(f"\n## {kind.upper()} run\n\n{text}" for kind, text in found)


def build(docs: Path) -> list[Path]:
    """Rebuild every page from docs/perf/data; the files written."""
    results: Results = {kind: load(docs / "data" / kind) for kind in KINDS if (docs / "data" / kind).is_dir()}
    notes = {}
    for kind, ops in results.items():
        for op, (_, rows) in ops.items():
            pytest_file = docs / "data" / kind / f"pytest_{op}.json"
            note = agreement(pytest_file, rows) if pytest_file.exists() else None
            if note:
                notes[(kind, op)] = note
    hand_notes = {(kind, path.stem.rpartition("-")[0]): path.read_text()
                  for kind in KINDS for path in sorted((docs / "notes").glob(f"*-{kind}.md"))}
    written = []
    for op in sorted({op for ops in results.values() for op in ops}):
        (docs / f"{op}.md").write_text(op_page(op, results, notes, hand_notes))
        written.append(docs / f"{op}.md")
    (docs / "README.md").write_text(readme(results))
    written.append(docs / "README.md")
    gelu = gelu_page(docs)
    if gelu:
        (docs / "gelu_fusion.md").write_text(gelu)
        written.append(docs / "gelu_fusion.md")
    return written


def summary(folder: Path) -> str:
    """A results folder as text: per op, the best plugin against torch, and pytest-benchmark's agreement."""
    found = load(folder)
    rows = [(op, meta["device"], _best_text(op_rows)) for op, (meta, op_rows) in found.items()]
    lines = [format_table(("op", "device", "best kernelzoo plugin vs torch"), rows, title=f"summary of {folder}")]
    for path in sorted(folder.glob("pytest_*.json")):
        op = path.stem.removeprefix("pytest_")
        note = agreement(path, found[op][1]) if op in found else None
        lines.append(note or f"{path.name}: no case in common with kernelzoo bench")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--gpu", type=Path, help="import the GPU results in this folder")
    p.add_argument("--cpu", type=Path, help="import the CPU results in this folder")
    p.add_argument("--summary", type=Path, help="print the summary of a results folder and write nothing")
    p.add_argument("--docs", type=Path, default=DOCS, help=f"the pages' folder (default {DOCS})")
    args = p.parse_args(argv)
    if args.summary:
        print(summary(args.summary))
        return 0
    for kind in KINDS:
        src = getattr(args, kind)
        if src is not None:
            print(f"imported {kind}: {', '.join(import_results(src, kind, args.docs)) or 'nothing'}", file=sys.stderr)
    for path in build(args.docs):
        print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
