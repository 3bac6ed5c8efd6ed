"""Kernel sources that share code: a textual ``#include "path"`` for the compiled plugins.

Every openmp and cuda plugin's source goes through :func:`expand_includes` (e.g. linear,
linear_backward, conv2d and conv2d_backward share one GEMM core, ``plugins/_gemm/gemm.cuh``).
NVRTC and the OpenMP build each compile one string with no include path, so a line
``#include "../_gemm/gemm.cuh"`` (a path relative to the including file) is replaced by that file's
text, between ``#line`` markers that keep compiler messages pointing at the right file and line.
``#include <...>`` lines are left to the compiler. The pasted text is part of the source hash, so
editing the core expires the tuned winners of every op that includes it.
"""

from __future__ import annotations

import re
from pathlib import Path

_INCLUDE = re.compile(r'#include "([\w./-]+)"\s*')


def expand_includes(text: str, name: str, directory: Path) -> str:
    """``text`` (the source ``name`` in ``directory``) with every ``#include "path"`` pasted in, recursively."""
    out = []
    for number, line in enumerate(text.split("\n"), start=1):
        match = _INCLUDE.fullmatch(line)
        if match is None:
            out.append(line)
            continue
        path = (directory / match.group(1)).resolve()
        if not path.is_file():
            raise FileNotFoundError(f"{name}:{number}: included file {match.group(1)!r} not found at {path}")
        out += [f'#line 1 "{path.name}"', expand_includes(path.read_text(), path.name, path.parent),
                f'#line {number + 1} "{name}"']
    return "\n".join(out)
