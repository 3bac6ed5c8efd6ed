"""Toy op and plugins the tuning tests plant, loaded by the tuner's workers through
KERNELZOO_EXTRA_PLUGINS=tuning_toys (with tests/ on PYTHONPATH).

``kz_toy`` is relu under another name, so nothing planted here touches the real ops. Its
``planted`` plugin has one config value per way a config can fail.
"""

from __future__ import annotations

import os
import time

import torch

from kernelzoo.backends.openmp import build
from kernelzoo.elementwise import UnaryOp
from kernelzoo.errors import CompileError, UnsupportedError
from kernelzoo.registry import Call, Implementation

MODES = ["ok", "slow", "wrong", "abort", "segv", "hang", "unsupported", "compile"]


class KzToy(UnaryOp):
    """relu, as a toy op of the tuning tests."""

    name = "kz_toy"
    shapes = {"cpu": [(64,)]}

    def reference(self, call: Call) -> torch.Tensor:
        return torch.relu(call.inputs["x"].double())


class KzToyPython(Implementation):
    op = "kz_toy"
    plugin = "python"
    dtypes = {"cpu": (torch.float32,)}

    def run(self, call: Call, config: dict) -> torch.Tensor:
        return torch.relu(call.inputs["x"])


class KzToyPlanted(Implementation):
    """One config per failure: a wrong (and fastest) answer, abort, a segfault in C, a hang, refusals."""

    op = "kz_toy"
    plugin = "planted"
    dtypes = {"cpu": (torch.float32,)}
    config_space = {"mode": MODES}
    default_config = {"mode": "ok"}
    tuning_seeds = ({"mode": "slow"},)

    def run(self, call: Call, config: dict) -> torch.Tensor:
        x, mode = call.inputs["x"], config["mode"]
        if mode == "wrong":
            return x  # no work at all: faster than every right answer, and wrong for x < 0
        if mode == "abort":
            os.abort()
        if mode == "segv":
            crash = build("void kz_toy_crash(void) { volatile int *p = 0; *p = 42; }", "void kz_toy_crash(void);")
            crash.kz_toy_crash()
        if mode == "hang":
            time.sleep(3600)
        if mode == "unsupported":
            raise UnsupportedError("kz_toy/planted: mode 'unsupported' refuses every call")
        if mode == "compile":
            raise CompileError("kz_toy.c:1:7: error: expected ';' before '}' token")
        if mode == "slow":
            time.sleep(0.002)
        return torch.relu(x)
