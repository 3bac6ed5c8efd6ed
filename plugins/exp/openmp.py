"""exp in OpenMP C: the shared unary loop (plugins/_elementwise/unary_openmp.h) with vector_math.h's exp.

:class:`UnaryOpenMP` is the wrapper of every unary op's openmp plugin (exp, log, tanh, pow, dropout):
each op's openmp.c is compiled into its own library, whose entry point it calls on the contiguous input.
"""

from __future__ import annotations

from typing import ClassVar

import torch

from kernelzoo.backends.openmp import OpenMPImplementation, ptr, thread_counts
from kernelzoo.registry import Call


class UnaryOpenMP(OpenMPImplementation):
    """Base of the unary ops' openmp plugins; a subclass sets ``op`` and, if it has any, ``arguments``."""

    cdef: ClassVar[str] = "void unary(const float *x, float *y, long long n, float a, int threads);"
    function: ClassVar[str] = "unary"  # the entry point in cdef
    config_space: ClassVar = {"threads": thread_counts()}
    default_config: ClassVar = {"threads": thread_counts()[-1]}

    def arguments(self, call: Call) -> tuple:
        """The entry point's arguments between n and threads: a = 0 (pow passes its exponent)."""
        return (0.0,)

    def run(self, call: Call, config: dict) -> torch.Tensor:
        x = call.inputs["x"].contiguous()
        y = call.empty(x.shape)
        entry = getattr(self.library(), self.function)
        entry(ptr(x), ptr(y), x.numel(), *self.arguments(call), config["threads"])
        return y


class ExpOpenMP(UnaryOpenMP):
    op = "exp"
