"""mul in OpenMP C: a vectorised loop for dense same-shape inputs, else a strided walk over the
merged layout with broadcast dimensions at stride 0 (no expanded copies).

:class:`BinaryOpenMP` is the wrapper of every binary op's openmp plugin: each op's openmp.c includes
../_elementwise/binary_openmp.h with its expression, its functions named after its ``kernel_name``.
"""

from __future__ import annotations

import torch

from kernelzoo.backends.openmp import OpenMPImplementation, ptr, thread_counts
from kernelzoo.elementwise import binary_plan
from kernelzoo.registry import Call


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


class MulOpenMP(BinaryOpenMP):
    op = "mul"
    cdef = binary_cdef("mul")
