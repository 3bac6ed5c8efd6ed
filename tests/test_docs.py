"""The docs that are generated stay in step with the code: docs/ops.md is what scripts/op_docs.py writes from the
registry, and every relative link of a docs page or the README reaches a file."""

from __future__ import annotations

import re
from pathlib import Path

from tuning_helpers import load_file

ROOT = Path(__file__).resolve().parent.parent


def test_the_op_reference_is_up_to_date():
    op_docs = load_file(ROOT / "scripts" / "op_docs.py")
    assert (ROOT / "docs" / "ops.md").read_text() == op_docs.render(), \
        "docs/ops.md is out of date: run python scripts/op_docs.py"


def test_the_op_reference_lists_every_builtin_op_and_plugin():
    from kernelzoo.registry import registry

    text = (ROOT / "docs" / "ops.md").read_text()
    for name, impls in registry.load().impls.items():
        if not type(registry.op(name)).__module__.startswith("kernelzoo_plugins."):
            continue
        section = text.split(f"\n## {name}\n", 1)[1].split("\n## ", 1)[0]
        for plugin in impls:
            assert f"\n| {plugin} |" in section, f"{name}/{plugin} missing from docs/ops.md"


def test_relative_links_reach_a_file():
    pages = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
    broken = []
    for page in pages:
        for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", page.read_text()):
            if "://" in target or target.startswith("mailto:") or not re.search(r"[A-Za-z]", target):
                continue
            # a hand note (docs/perf/notes/OP-KIND.md) is pasted into docs/perf/OP.md: its links start there
            base = page.parent.parent if page.parent.name == "notes" else page.parent
            if not (base / target).exists():
                broken.append(f"{page.relative_to(ROOT)} -> {target}")
    assert not broken, "\n".join(broken)
