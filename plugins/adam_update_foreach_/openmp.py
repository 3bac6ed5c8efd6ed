"""adam_update_'s OpenMP C kernel on each entry in turn: on the CPU a call per tensor costs little next to
its arithmetic, and each call is one parallel, vectorised pass."""

from __future__ import annotations

import torch

from kernelzoo.backends.openmp import thread_counts
from kernelzoo.registry import Availability, Call, Implementation, registry

from . import run_each


class AdamUpdateForeachOpenMP(Implementation):
    op = "adam_update_foreach_"
    plugin = "openmp"
    dtypes = {"cpu": (torch.float32,)}
    config_space = {"threads": thread_counts()}
    default_config = {"threads": thread_counts()[-1]}

    def available(self) -> Availability:  # adam_update_'s compiler and library
        return registry.availability(registry.impl("adam_update_", "openmp"))

    def run(self, call: Call, config: dict) -> tuple:
        return run_each(call, "openmp", config)
