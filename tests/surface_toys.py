"""A toy op whose only plugin is always wrong, so that tuning it ends without a verified winner; loaded by the
tuner's workers through KERNELZOO_EXTRA_PLUGINS=surface_toys (with tests/ on PYTHONPATH)."""

from __future__ import annotations

import torch

from kernelzoo.elementwise import UnaryOp
from kernelzoo.registry import Call, Implementation


class KzNever(UnaryOp):
    """relu, under another name."""

    name = "kz_never"
    shapes = {"cpu": [(64,)]}

    def reference(self, call: Call) -> torch.Tensor:
        return torch.relu(call.inputs["x"].double())


class KzNeverPython(Implementation):
    """Returns its input: wrong for every negative element."""

    op = "kz_never"
    plugin = "python"
    dtypes = {"cpu": (torch.float32,)}

    def run(self, call: Call, config: dict) -> torch.Tensor:
        return call.inputs["x"].clone()
