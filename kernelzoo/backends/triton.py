"""Triton backend: availability, the interpreter, and the base class of ``triton`` plugins.

Kernels are ``@triton.jit`` functions launched with an explicit config (block sizes,
``num_warps``, ``num_stages``) chosen by kernelzoo's tuner, never ``triton.autotune``.
With ``TRITON_INTERPRET=1`` (set before Triton is imported) the same kernels run in Triton's
interpreter on CPU tensors; that is how CI runs them. The interpreter executes each program
in Python, so it is only for small sizes, and never chosen automatically.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Mapping
from typing import ClassVar

import torch

from kernelzoo.registry import FLOATS, Availability, Implementation


def interpreting() -> bool:
    return os.environ.get("TRITON_INTERPRET", "0") == "1"


@functools.cache
def version() -> str:
    try:
        import triton
    except ImportError:
        return ""
    return triton.__version__


@functools.cache
def available() -> Availability:
    if not version():
        return Availability(False, "triton is not installed (pip install triton; Linux only)")
    if interpreting() or torch.cuda.is_available():
        return Availability(True)
    return Availability(False, "no CUDA GPU (set TRITON_INTERPRET=1 before import to run "
                               "Triton kernels in its interpreter on the CPU)")


class TritonImplementation(Implementation):
    """Base of the ``triton`` plugins."""

    plugin: ClassVar[str] = "triton"
    dtypes: ClassVar[Mapping[str, tuple[torch.dtype, ...]]] = {
        "cuda": FLOATS, "cpu": (torch.float32,)}

    def available(self) -> Availability:
        return available()

    def devices(self) -> tuple[str, ...]:
        return ("cpu",) if interpreting() else ("cuda",)
