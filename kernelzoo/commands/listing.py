"""``kernelzoo list``: every op × plugin with its availability and the reason."""

from __future__ import annotations

import argparse

from kernelzoo.commands._common import add_json, check_ops, print_json
from kernelzoo.registry import dtype_name, registry
from kernelzoo.table import format_table


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("list", help="list ops and plugins with their availability")
    add_json(p, "a list of objects (op, plugin, available, reason, devices, dtypes, config_space)")
    p.add_argument("--op", action="append", help="only these ops (repeatable)")
    p.set_defaults(func=run)


def rows(ops: list[str] | None = None) -> list[dict]:
    """One dict per op × plugin: op, plugin, available, reason, devices, dtypes, config_space."""
    out = []
    for impl in registry.load():
        if ops and impl.op not in ops:
            continue
        availability = registry.availability(impl)
        out.append({
            "op": impl.op,
            "plugin": impl.plugin,
            "available": availability.ok,
            "reason": availability.reason,
            "devices": list(impl.devices()) if availability.ok else [],
            "dtypes": {d: [dtype_name(t) for t in ts] for d, ts in impl.dtypes.items()},
            "config_space": {k: list(v) for k, v in impl.config_space.items()},
        })
    return out


def run(args: argparse.Namespace) -> int:
    found = rows(check_ops(args.op) or None)
    if args.json:
        print_json(found)
        return 0
    table = [(r["op"], r["plugin"], "yes" if r["available"] else "no", ",".join(r["devices"]) or "-",
              r["reason"] or "") for r in found]
    print(format_table(("op", "plugin", "available", "devices", "reason"), table))
    return 0
