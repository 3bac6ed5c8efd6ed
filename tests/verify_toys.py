"""A toy op whose plugins compile, for the tests of ``tune --verify``, ``--stale`` and ``--missing``: loaded by the
tuner's workers through KERNELZOO_EXTRA_PLUGINS=verify_toys (with tests/ on PYTHONPATH).

``kz_verify`` is relu under another name. Each plugin "compiles" a config the first time a process runs it: a
compile writes a marker in ``$KZ_VERIFY_CACHE`` (a cache on disk, as NVRTC's and Triton's are) and a line to
``$KZ_VERIFY_CACHE/compiles.log`` (the kernel and the process); a process that finds the marker loads it and
logs nothing. The log counts the compiles over every process of a run.
"""

from __future__ import annotations

import functools
import os
from pathlib import Path

import torch

from kernelzoo.elementwise import UnaryOp
from kernelzoo.registry import Call, Implementation


class KzVerify(UnaryOp):
    name = "kz_verify"
    shapes = {"cpu": [(64,), (1024,)]}

    def reference(self, call: Call) -> torch.Tensor:
        return torch.relu(call.inputs["x"].double())


@functools.cache
def compiled(plugin: str, dtype: str, block: int) -> str:
    """The toy kernel of (plugin, dtype, block): compiled once on disk, then loaded."""
    cache = Path(os.environ["KZ_VERIFY_CACHE"])
    marker = cache / f"{plugin}-{dtype}-{block}"
    if not marker.exists():
        with open(cache / "compiles.log", "a") as log:
            log.write(f"{marker.name}@{os.getpid()}\n")
        marker.write_text("compiled")
    return marker.name


class _Toy(Implementation):
    op = "kz_verify"
    dtypes = {"cpu": (torch.float32, torch.float16)}
    config_space = {"BLOCK": [1, 2, 4, 8]}
    default_config = {"BLOCK": 1}

    def run(self, call: Call, config: dict) -> torch.Tensor:
        x = call.inputs["x"]
        compiled(self.plugin, str(x.dtype).removeprefix("torch."), config["BLOCK"])
        return torch.relu(x)


class KzVerifyFast(_Toy):
    plugin = "fast"


class KzVerifyMid(_Toy):
    plugin = "mid"


class KzVerifySlow(_Toy):
    plugin = "slow"
    dtypes = {"cpu": (torch.float32,)}  # no float16: the file's gap has fewer tasks of it
