"""The wrappers of the elementwise OpenMP loops: each op's openmp.c includes unary_openmp.h or binary_openmp.h
with its expression and is compiled into its own library, and its openmp.py subclasses one of these.

:class:`UnaryOpenMP` calls the library's entry point on the contiguous input. :class:`BinaryOpenMP` runs a
vectorised loop for dense same-shape inputs, else a strided walk over the merged layout with broadcast
dimensions at stride 0 (no expanded copies); its functions are named after the op's ``kernel_name``.
"""

from __future__ import annotations

from typing import ClassVar

import torch

from kernelzoo.backends.openmp import OpenMPImplementation, ptr, thread_counts
from kernelzoo.elementwise import binary_plan
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


def binary_cdef(*names: str) -> str:
    """The C declarations of binary_openmp.h's functions, for each kernel name."""
    return "".join(f"""
        void {name}_contiguous(const float *a, const float *b, float *out, long long n, int threads);
        void {name}_strided(const float *a, const float *b, float *out, int ndim, const long long *sizes,
                            const long long *a_strides, const long long *b_strides, int threads);
    """ for name in names)


class BinaryOpenMP(OpenMPImplementation):
    """Base of the binary ops' openmp plugins; a subclass sets ``op`` and ``cdef``."""

    config_space = {"threads": thread_counts()}
    default_config = {"threads": thread_counts()[-1]}

    def run(self, call: Call, config: dict) -> torch.Tensor:
        a, b, plan, out = binary_plan(call)
        lib, name, threads = self.library(), call.op.kernel_name(call), config["threads"]
        if out.numel() == 0:
            return out
        if plan.contiguous:
            getattr(lib, f"{name}_contiguous")(ptr(a), ptr(b), ptr(out), out.numel(), threads)
            return out
        # (ndim,) int64 arrays, alive across the call
        sizes, a_strides, b_strides = (torch.tensor(v, dtype=torch.int64)
                                       for v in (plan.sizes, plan.a_strides, plan.b_strides))
        getattr(lib, f"{name}_strided")(ptr(a), ptr(b), ptr(out), len(plan.sizes), ptr(sizes, "long long *"),
                                        ptr(a_strides, "long long *"), ptr(b_strides, "long long *"), threads)
        return out
