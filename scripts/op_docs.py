"""Write docs/ops.md, the op reference, from the registry: per op its call, what it computes, the dtypes each
plugin takes on each device, what each plugin is, and the untuned plugin order.

    python scripts/op_docs.py            # rewrite docs/ops.md
    python scripts/op_docs.py --check    # exit 1 if docs/ops.md is not what the registry gives

Only the built-in plugins (``kernelzoo_plugins``) are listed: a third-party package installed beside them
must not change the project's reference.
"""

from __future__ import annotations

import argparse
import inspect
import sys
from collections.abc import Sequence
from pathlib import Path

import torch

from kernelzoo.dispatch import plugin_order
from kernelzoo.registry import Implementation, Op, registry

OUT = Path(__file__).resolve().parent.parent / "docs" / "ops.md"
BUILTIN = "kernelzoo_plugins."
PLUGIN_ORDER = ("python", "torch", "openmp", "cuda", "triton")


def _dtype(d: torch.dtype) -> str:
    return str(d).removeprefix("torch.")


def _paragraph(doc: str | None) -> str:
    """The first paragraph of a docstring, on one line."""
    text = inspect.cleandoc(doc or "").split("\n\n")[0]
    return " ".join(text.split())


def _call(op: Op) -> str:
    params = [p.replace(annotation=inspect.Parameter.empty) for p in op.signature.parameters.values()]
    return f"kernelzoo.ops.{op.name}{inspect.Signature(params)}"


def _summary(op: Op) -> str:
    """What the op computes: its docstring's first paragraph without the leading call form it repeats."""
    text = _paragraph(type(op).__doc__)
    head, sep, rest = text.partition(": ")
    return rest if sep and head.startswith(op.name + "(") else text


def _plugins(impls: Sequence[Implementation]) -> list[str]:
    rows = ["| plugin | dtypes | what it is |", "|---|---|---|"]
    for impl in sorted(impls, key=lambda i: (PLUGIN_ORDER.index(i.plugin) if i.plugin in PLUGIN_ORDER
                                             else len(PLUGIN_ORDER), i.plugin)):
        dtypes = "; ".join(f"{device}: {', '.join(map(_dtype, kinds))}" for device, kinds in impl.dtypes.items())
        about = _paragraph(sys.modules[type(impl).__module__].__doc__).replace("|", "\\|")
        rows.append(f"| {impl.plugin} | {dtypes} | {about} |")
    return rows


def render() -> str:
    reg = registry.load()
    lines = ["# Op reference", "",
             "Generated from the registry by `scripts/op_docs.py`; do not edit by hand. Every op is "
             "`kernelzoo.ops.<name>` (torch tensors in and out) and `torch.ops.kernelzoo.<name>`. A call runs the "
             "tuned winner for its device, dtype and shape, else the first plugin of the untuned order that can "
             "run it; `with kernelzoo.use(\"triton\"):` forces one. A plugin that cannot run a call (a dtype, a "
             "device, a shape limit) says why: `kernelzoo.explain(op, *args)`.", ""]
    names = sorted(n for n, op in reg.ops.items() if type(op).__module__.startswith(BUILTIN))
    lines += [" · ".join(f"[{n}](#{n})" for n in names), ""]
    for name in names:
        op = reg.ops[name]
        impls = [i for i in reg.impls.get(name, {}).values() if type(i).__module__.startswith(BUILTIN)]
        lines += [f"## {name}", "", f"`{_call(op)}`", "", _summary(op), ""]
        if op.inplace:
            lines += [f"Updates {', '.join(f'`{a}`' for a in op.inplace)} in place.", ""]
        lines += [*_plugins(impls), ""]
        orders = []
        for device in ("cuda", "cpu"):
            order = plugin_order(device, [i.plugin for i in impls if device in i.dtypes], name)
            if order:
                orders.append(f"{'GPU' if device == 'cuda' else 'CPU'}: {', '.join(order)}")
        lines += [f"Untuned order ({'; '.join(orders)}).", ""]
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if docs/ops.md is out of date")
    args = parser.parse_args(argv)
    text = render()
    if args.check:
        current = OUT.read_text() if OUT.exists() else ""
        if current != text:
            print(f"{OUT} is out of date: run python scripts/op_docs.py", file=sys.stderr)
            return 1
        return 0
    OUT.write_text(text)
    print(OUT)
    return 0


if __name__ == "__main__":
    sys.exit(main())
