"""Merge the records of a ``kernelzoo db export`` file into a shipped one, in place.

    python scripts/merge_records.py tuning_db/h100-sxm.json fresh.json
    python scripts/merge_records.py tuning_db/h100-sxm.json --drop-stale   # only remove the stale records

A fresh record replaces the shipped record of its key (op, plugin, dtype, shape, bucket, flags, GPU hardware) where
it stands, so the shipped file's order and the diff stay readable; a key the shipped file lacks is appended. The last
lines count what was replaced and added, and name the shipped records whose kernel source has changed since they
were tuned (the dispatcher ignores those until they are re-tuned). ``--drop-stale`` removes those instead, for a
kernel changed where its GPU is not at hand (tests/test_shipped_winners.py fails while a shipped file holds any).
"""

from __future__ import annotations

import argparse
import json

from kernelzoo.fingerprint import HARDWARE_FIELDS
from kernelzoo.registry import registry


def ident(record: dict) -> tuple:
    """A record's key in a shipped file: the call's key and the GPU's hardware (a record measured under another
    driver or compiler version on the same chip replaces it)."""
    device = record.get("device") or {}
    return (record["op"], record["plugin"], record["dtype"], record["shape"], tuple(record["bucket"]),
            record["flags"], tuple(str(device.get(k, "")) for k in HARDWARE_FIELDS))


def is_stale(record: dict) -> bool:
    """Whether the installed plugins would no longer use the record (source changed, plugin gone, or its config
    left the space)."""
    return not registry.is_current(record["op"], record["plugin"], record["source_hash"], record.get("config"))


def name(record: dict) -> str:
    return f"{record['op']}/{record['plugin']} {record['dtype']} {record['shape']}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("shipped")
    parser.add_argument("fresh", nargs="?", help="a `kernelzoo db export` file (none: merge nothing)")
    parser.add_argument("--drop-stale", action="store_true", help="remove the records whose source has changed")
    args = parser.parse_args(argv)
    with open(args.shipped) as f:
        shipped = json.load(f)
    fresh = []
    if args.fresh is not None:
        with open(args.fresh) as f:
            fresh = json.load(f)["records"]
    where = {ident(r): i for i, r in enumerate(shipped["records"])}
    replaced = 0
    for record in fresh:
        i = where.get(ident(record))
        if i is None:
            where[ident(record)] = len(shipped["records"])
            shipped["records"].append(record)
        else:
            shipped["records"][i] = record
            replaced += 1
    current, old = [], []
    for record in shipped["records"]:
        (old if is_stale(record) else current).append(record)
    if args.drop_stale:
        shipped["records"] = current
        print(f"{args.shipped}: dropped {len(old)} record(s) with a changed source")
        for record in old:
            print(f"  dropped: {name(record)}")
        old = []
    with open(args.shipped, "w") as f:
        f.write(json.dumps(shipped, indent=1) + "\n")
    print(f"{args.shipped}: {replaced} replaced, {len(fresh) - replaced} added, {len(shipped['records'])} records, "
          f"{len(old)} with a changed source")
    for record in old:
        print(f"  changed since tuned: {name(record)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
