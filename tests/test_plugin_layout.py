"""The built-in plugins' layout rule: an op folder (plugins/<op>/) reads only its own modules, the family modules
(plugins/_<family>/) and the core. What two ops share lives in a family module; one op reaches another only by
calling it through ``kernelzoo.ops``. The rule covers Python imports (absolute and relative) and the
``#include "..."`` lines of the kernel sources."""

from __future__ import annotations

import ast
import re
from pathlib import Path

PLUGINS = Path(__file__).resolve().parent.parent / "plugins"
OP_FOLDERS = sorted(p.name for p in PLUGINS.iterdir() if (p / "__init__.py").is_file() and not p.name.startswith("_"))
INCLUDE = re.compile(r'\s*#\s*include\s+"([^"]+)"')


def imported_folders(path: Path) -> list[tuple[int, str]]:
    """(line, plugins folder) of each import in the Python module ``path`` that reaches a folder of plugins/."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom):
            if node.level == 0 and node.module and node.module.startswith("kernelzoo_plugins."):
                found.append((node.lineno, node.module.split(".")[1]))
            elif node.level == 1:
                found.append((node.lineno, path.parent.name))  # `from . import x`: its own folder
            elif node.level >= 2 and node.module:  # `from ..softmax import x`
                found.append((node.lineno, node.module.split(".")[0]))
        elif isinstance(node, ast.Import):
            found += [(node.lineno, a.name.split(".")[1]) for a in node.names
                      if a.name.startswith("kernelzoo_plugins.")]
    return found


def included_folders(path: Path) -> list[tuple[int, str]]:
    """(line, plugins folder) of each ``#include "../<folder>/..."`` of the kernel source ``path``."""
    found = []
    for number, line in enumerate(path.read_text().splitlines(), start=1):
        match = INCLUDE.match(line)
        if match and match.group(1).startswith("../"):
            found.append((number, match.group(1).split("/")[1]))
    return found


def violations(folder: Path) -> list[str]:
    out = []
    for path in sorted(folder.iterdir()):
        if path.suffix == ".py":
            reached = imported_folders(path)
        elif path.suffix in {".c", ".h", ".cu", ".cuh"}:
            reached = included_folders(path)
        else:
            continue
        out += [f"{path.relative_to(folder.parent)}:{line} reads plugins/{other}/" for line, other in reached
                if other != folder.name and not other.startswith("_")]
    return out


def test_the_rule_sees_an_import_of_another_op_folder(tmp_path):
    op = tmp_path / "toy_backward"
    op.mkdir()
    (op / "__init__.py").write_text("from kernelzoo_plugins._rows.softmax import as_rows\n"
                                    "from kernelzoo_plugins.toy import helper\n")
    (op / "python.py").write_text("from . import helper\nfrom ..toy.python import ToyPython\n"
                                  "import kernelzoo_plugins.toy.triton\n")
    (op / "cuda.cu").write_text('#include "../_cuda/pack.cuh"\n#include "../toy/cuda.cu"\n')
    assert violations(op) == [
        "toy_backward/__init__.py:2 reads plugins/toy/",
        "toy_backward/cuda.cu:2 reads plugins/toy/",
        "toy_backward/python.py:2 reads plugins/toy/",
        "toy_backward/python.py:3 reads plugins/toy/",
    ]


def test_no_op_folder_reads_another_op_folder():
    assert len(OP_FOLDERS) > 30
    found = [v for name in OP_FOLDERS for v in violations(PLUGINS / name)]
    assert not found, "an op folder reads another (move what they share into a plugins/_<family>/ module, " \
                      "or call the op through kernelzoo.ops):\n" + "\n".join(found)
