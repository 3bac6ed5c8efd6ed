"""Re-time the winners of a ``kernelzoo db export`` file on this machine and compare.

    python scripts/check_shipped.py tuning_db/h100-sxm.json [--op OP]...

For every record measured on this machine's hardware whose kernel source is still the
installed one: the same plugin and config on fresh inputs of the recorded shape (and of the
flags' params, conv2d's stride and padding, from the op's representative shapes), timed as
the tuner times (kernelzoo.timing.time_fn, the host's enqueue hidden), next to the stored
median and its noise. The last line counts the records within noise (|ratio - 1| <= max(stored
spread, new spread, 3%)).
"""

from __future__ import annotations

import argparse
import json

import torch

from kernelzoo.fingerprint import fingerprint
from kernelzoo.registry import Call, Op, parse_dtype, registry
from kernelzoo.table import format_table
from kernelzoo.timing import time_fn


def rebuild(op: Op, rec: dict, device: str) -> Call | None:
    """A call of the record's key on fresh inputs: its shape text parsed, or, where the key's flags hold params
    the text does not (conv2d's stride and padding), the op's representative shape on ``device`` whose call has
    that shape text and those flags; None if neither does."""
    dtype, sizes = parse_dtype(rec["dtype"]), op.parse_shape(rec["shape"])
    call = op.example(sizes, dtype, device, torch.Generator().manual_seed(1))
    if op.flags(call) == rec["flags"]:
        return call
    for shape in op.shapes.get(device, ()):
        if tuple(shape[:len(sizes)]) != sizes:
            continue
        call = op.example(shape, dtype, device, torch.Generator().manual_seed(1))
        if op.shape_string(call) == rec["shape"] and op.flags(call) == rec["flags"]:
            return call
    return None


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("file")
    parser.add_argument("--op", action="append")
    args = parser.parse_args()
    with open(args.file) as f:
        records = json.load(f)["records"]
    device = "cuda" if torch.cuda.is_available() else "cpu"
    here = fingerprint(device)
    rows, within, checked = [], 0, 0
    for rec in records:
        if args.op and rec["op"] not in args.op:
            continue
        if rec["device"]["name"] != here.name:
            continue
        impl = registry.impl(rec["op"], rec["plugin"])
        op = registry.op(rec["op"])
        if impl.source_hash != rec["source_hash"]:
            rows.append([rec["op"], rec["plugin"], rec["dtype"], rec["shape"], f"{rec['time_ms']:.4f}", "-", "-",
                         "stale source"])
            continue
        call = rebuild(op, rec, device)
        if call is None:
            rows.append([rec["op"], rec["plugin"], rec["dtype"], rec["shape"], f"{rec['time_ms']:.4f}", "-", "-",
                         f"flags {rec['flags']!r} not rebuilt"])
            continue
        config = impl.config(rec["config"])
        # GPU time alone, as the tuner's worker stores it: with the host's enqueue visible, a kernel shorter than
        # the host's time per call measures the host, several times the stored median
        timing = time_fn(lambda impl=impl, call=call, config=config: impl.run(call, config), device,
                         hide_host=True)
        ratio = timing.median_ms / rec["time_ms"]
        noise = max(rec["spread"], timing.spread, 0.03)
        ok = abs(ratio - 1) <= noise
        checked, within = checked + 1, within + ok
        rows.append([rec["op"], rec["plugin"], rec["dtype"], rec["shape"], f"{rec['time_ms']:.4f}",
                     f"{timing.median_ms:.4f}", f"{ratio:.3f}", "within noise" if ok else f"off (noise {noise:.1%})"])
    print(format_table(("op", "plugin", "dtype", "shape", "stored ms", "now ms", "now/stored", "verdict"), rows))
    print(f"check_shipped: {within} of {checked} re-timed winners within noise on {here.name}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
