"""The spec: adam_update_'s python plugin on each entry in turn."""

from __future__ import annotations

from kernelzoo.registry import FLOATS, Call, Implementation

from . import run_each


class AdamUpdateForeachPython(Implementation):
    op = "adam_update_foreach_"
    plugin = "python"
    dtypes = {"cpu": FLOATS, "cuda": FLOATS}

    def run(self, call: Call, config: dict) -> tuple:
        return run_each(call, "python")
