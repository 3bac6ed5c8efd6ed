"""The recipes of docs/adding-an-op.md and docs/adding-a-plugin.md, followed as written: their labelled code blocks
are written to disk as the package they describe, their other Python blocks run in order, and every
implementation they add then passes the op's conformance cases on the CPU. A recipe whose code stops working
fails here."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

DOCS = Path(__file__).resolve().parent.parent / "docs"
# a block: an optional "`path`:" line, a blank line, then ```lang ... ```
BLOCK = re.compile(r"(?:^`(?P<path>[\w./]+)`:\n\n)?^```(?P<lang>\w+)\n(?P<code>.*?)^```$", re.M | re.S)

CONFORMANCE = '''
import zlib
import torch
from kernelzoo.registry import registry

op = registry.op("softsign")
plugins = sorted(impl.plugin for impl in registry.implementations("softsign"))
print("plugins:", " ".join(plugins))
for impl in registry.implementations("softsign"):
    assert registry.availability(impl), (impl.key, registry.availability(impl).reason)
    for dtype in impl.dtypes.get("cpu", ()):
        for case in op.cases():
            g = torch.Generator().manual_seed(zlib.crc32(case.id.encode()))
            args, kwargs = case.make(torch.device("cpu"), dtype, g)
            call = op.check(*args, **kwargs)
            mismatch = op.verify(call, impl.run(call, impl.config()), op.reference(call))
            assert mismatch is None, f"{impl.key} {dtype} {case.id}: {mismatch}"
print("conformance: ok")
'''


def blocks(page: str, docs: Path = DOCS) -> list[tuple[str | None, str, str]]:
    """(path or None, language, code) of every fenced block of a docs page, in order."""
    return [(m["path"], m["lang"], m["code"]) for m in BLOCK.finditer((docs / page).read_text())]


def follow(pages: list[str], root: Path, docs: Path = DOCS) -> subprocess.CompletedProcess:
    """Write the pages' files under ``root`` and run their Python blocks, then the conformance cases."""
    steps = []
    for page in pages:
        for path, lang, code in blocks(page, docs):
            if path is not None:
                (root / path).parent.mkdir(parents=True, exist_ok=True)
                (root / path).write_text(code)
            elif lang == "python":
                steps.append(code)
    script = root / "follow.py"
    script.write_text("\n".join([*steps, CONFORMANCE]))
    env = {**os.environ, "PYTHONPATH": str(root), "KERNELZOO_CACHE_DIR": str(root / "cache"),
           "KERNELZOO_DB": f"sqlite:///{root / 'tuning.sqlite'}"}
    return subprocess.run([sys.executable, str(script)], capture_output=True, text=True, cwd=root, env=env,
                          timeout=600)


def test_the_recipes_label_their_files():
    files = [path for page in ("adding-an-op.md", "adding-a-plugin.md") for path, _, _ in blocks(page) if path]
    assert files == ["my_kernels/softsign/__init__.py", "my_kernels/softsign/python.py",
                     "my_kernels/softsign/torch.py", "my_kernels/__init__.py", "my_kernels/softsign/openmp.c",
                     "my_kernels/softsign/openmp.py"]


def test_adding_an_op_as_written(tmp_path):
    done = follow(["adding-an-op.md"], tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "plugins: python torch" in done.stdout and "conformance: ok" in done.stdout


def test_adding_a_plugin_as_written(tmp_path):
    from kernelzoo.backends.openmp import available

    if not available():
        pytest.skip(f"no OpenMP build here: {available().reason}")
    done = follow(["adding-an-op.md", "adding-a-plugin.md"], tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "plugins: openmp python torch" in done.stdout and "conformance: ok" in done.stdout


def test_a_broken_recipe_fails(tmp_path):
    """The harness itself: a wrong reference in the spec makes the conformance step fail."""
    page = (DOCS / "adding-an-op.md").read_text().replace("return x / (1 + x.abs())\n```", "return x\n```", 1)
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "adding-an-op.md").write_text(page)
    done = follow(["adding-an-op.md"], tmp_path, tmp_path / "docs")
    assert done.returncode != 0 and "softsign/" in done.stderr, textwrap.shorten(done.stdout + done.stderr, 2000)
