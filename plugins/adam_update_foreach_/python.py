"""The spec: adam_update_'s python plugin on each entry in turn."""

from __future__ import annotations

from kernelzoo.backends.tensor_ops import PythonImplementation
from kernelzoo.registry import Call

from . import run_each


class AdamUpdateForeachPython(PythonImplementation):
    op = "adam_update_foreach_"

    def run(self, call: Call, config: dict) -> tuple:
        return run_each(call, "python")
