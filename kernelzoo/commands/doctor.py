"""``kernelzoo doctor``: devices, compilers, NVRTC, Triton, and the tuning database's path, health and counts."""

from __future__ import annotations

import argparse
import platform
import sys
from typing import Any

import torch

from kernelzoo.commands._common import add_db, add_json, print_json

_found: list[dict[str, Any]] = []  # this run's lines, for --json


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("doctor", help="what kernelzoo finds here: devices, compilers, the tuning database")
    add_json(p, "a list of checks (name, ok, text)")
    add_db(p)
    p.set_defaults(func=run)


def _line(name: str, ok: bool | None, text: str) -> None:
    _found.append({"name": name, "ok": ok, "text": text})


def run(args: argparse.Namespace) -> int:
    _found.clear()
    try:
        status = _checks(args)
    finally:
        if args.json:
            print_json(_found)
        else:
            for line in _found:
                mark = {True: "ok ", False: "-- ", None: "   "}[line["ok"]]
                print(f"{mark} {line['name']:<16} {line['text']}")
            sys.stdout.flush()
    return status


def _checks(args: argparse.Namespace) -> int:
    from kernelzoo import __version__
    from kernelzoo.backends import cuda, openmp
    from kernelzoo.backends import triton as triton_backend
    from kernelzoo.fingerprint import cpu_fingerprint, gpu_fingerprint

    _line("kernelzoo", None, f"{__version__}, Python {platform.python_version()}, torch {torch.__version__}")
    cpu = cpu_fingerprint()
    _line("cpu", True, f"{cpu.describe()}, fingerprint {cpu.hash}")
    gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    for i in range(gpus):
        gpu = gpu_fingerprint(i)
        _line(f"cuda:{i}", True, f"{gpu.describe()}, driver {gpu.driver}, CUDA {gpu.cuda}, fingerprint {gpu.hash}")
    if not gpus:
        _line("cuda", False, "no CUDA GPU (torch.cuda.is_available() is False)")
    omp = openmp.available()
    _line("C compiler", omp.ok, f"{openmp.compiler_version() or openmp.compiler()}" +
          ("" if omp else f": {omp.reason}"))
    ok, reason = cuda.compile_available()
    _line("NVRTC", ok, reason)
    tri = triton_backend.available()
    _line("Triton", tri.ok, (triton_backend.version() or "not installed") + ("" if tri else f": {tri.reason}"))
    return _database(args.db)


def _database(url: str | None) -> int:
    from kernelzoo.db import as_url, default_url
    from kernelzoo.db.models import SCHEMA_VERSION
    from kernelzoo.db.ranking import by_key, config_problem
    from kernelzoo.db.records import counts, winners
    from kernelzoo.db.shipped import shipped_files
    from kernelzoo.db.store import Store, display_url, open_store
    from kernelzoo.errors import DatabaseError
    from kernelzoo.registry import registry

    url = as_url(url or default_url())
    try:
        store = Store(url)
        size = f", {store.path.stat().st_size / 1e6:.2f} MB" if store.path and store.path.exists() else ""
        state = store.schema_state()
        store.check_health()
    except DatabaseError as exc:
        _line("database", False, f"{display_url(url)}: {exc}")
        return 1
    if state.kind not in ("current", "empty"):
        _line("database", False, f"{store.display_url}{size}: schema {state.kind} (version {state.version}, "
              f"this kernelzoo uses {SCHEMA_VERSION})")
        return 1
    try:
        store = open_store(url)
    except DatabaseError as exc:
        _line("database", False, f"{store.display_url}{size}: {exc}")
        return 1
    registry.load()
    n = counts(store)
    skipped: list[str] = []
    rows = winners(store, skipped=skipped)
    for w in rows:
        impl = registry.impls.get(w.op, {}).get(w.plugin)
        problem = config_problem(impl, w.config) if impl is not None and impl.source_hash == w.source_hash else None
        if problem is not None:
            skipped.append(f"{w.op}/{w.plugin} {w.dtype} bucket {','.join(map(str, w.bucket))}: {problem}")
    keys = by_key(rows)
    current = sum(1 for w, _, _ in keys if w is not None)
    read_only = f", read-only ({store.read_only_reason})" if store.read_only else ""
    _line("database", True, f"{store.display_url}{size}, schema version {SCHEMA_VERSION}, healthy{read_only}")
    _line("winners", None, f"{current} key(s) with a current winner, {n['winners']} per-plugin row(s) "
          f"({sum(len(s) for _, _, s in keys)} stale), {n['devices']} device(s), {n['trials']} trial(s), "
          f"{n['missed keys']} missed key(s) pending")
    if skipped:
        _line("bad rows", False, f"{len(skipped)} row(s) that op calls skip; fix or delete them, or re-tune "
              "their keys:")
        for line in skipped:
            print(f"      {line}")
    _ceilings(store)
    files = shipped_files()
    _line("shipped", None, ", ".join(f.name for f in files) if files else "no shipped winners files")
    return 0


def _ceilings(store: Any) -> None:
    """The CPU's stored calibration (the floor of % floor), its noise and the load it was measured under."""
    from kernelzoo.calibrate import describe, load_note
    from kernelzoo.db.records import device_ceilings
    from kernelzoo.fingerprint import cpu_fingerprint

    found = device_ceilings(store, cpu_fingerprint())
    if not found:
        _line("cpu ceilings", None, "not measured yet (kernelzoo bench --calibrate --device cpu, or the first tune)")
        return
    busy = bool(load_note(found.get("load") or [], found.get("cores")))
    _line("cpu ceilings", not busy, f"{describe(found, with_load=False)} ({found.get('source', 'measured')})")
