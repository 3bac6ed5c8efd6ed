"""The kinds whose plugins are torch tensor ops and need no compiler: ``python``, the readable spec (the op's
math in plain tensor ops, in float32 whatever the input dtype), and ``torch``, torch's own kernel, the
baseline to beat. Both take every float dtype on the CPU and on the GPU; a plugin that takes fewer sets its
own ``dtypes``."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import ClassVar

import torch

from kernelzoo.registry import FLOATS, Implementation


class PythonImplementation(Implementation):
    """Base of the ``python`` plugins."""

    plugin: ClassVar[str] = "python"
    dtypes: ClassVar[Mapping[str, Sequence[torch.dtype]]] = {"cpu": FLOATS, "cuda": FLOATS}


class TorchImplementation(Implementation):
    """Base of the ``torch`` plugins."""

    plugin: ClassVar[str] = "torch"
    dtypes: ClassVar[Mapping[str, Sequence[torch.dtype]]] = {"cpu": FLOATS, "cuda": FLOATS}
