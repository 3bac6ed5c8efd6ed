"""add in OpenMP C: a vectorised loop for dense same-shape inputs, else a strided walk over
the merged layout with broadcast dimensions at stride 0 (no expanded copies)."""

from __future__ import annotations

import torch

from kernelzoo.backends.openmp import OpenMPImplementation, ptr, thread_counts
from kernelzoo.elementwise import binary_plan
from kernelzoo.registry import Call


class AddOpenMP(OpenMPImplementation):
    op = "add"
    cdef = """
        void add_contiguous(const float *a, const float *b, float *out, float alpha, long long n,
                            int threads);
        void add_strided(const float *a, const float *b, float *out, float alpha, int ndim,
                         const long long *sizes, const long long *a_strides, const long long *b_strides,
                         int threads);
    """
    config_space = {"threads": thread_counts()}
    default_config = {"threads": thread_counts()[-1]}

    def run(self, call: Call, config: dict) -> torch.Tensor:
        a, b, plan, out = binary_plan(call)
        lib, alpha, threads = self.library(), call.params["alpha"], config["threads"]
        if out.numel() == 0:
            return out
        if plan.contiguous:
            lib.add_contiguous(ptr(a), ptr(b), ptr(out), alpha, out.numel(), threads)
            return out
        # (ndim,) int64 arrays, alive across the call
        sizes, a_strides, b_strides = (torch.tensor(v, dtype=torch.int64)
                                       for v in (plan.sizes, plan.a_strides, plan.b_strides))
        lib.add_strided(ptr(a), ptr(b), ptr(out), alpha, len(plan.sizes), ptr(sizes, "long long *"),
                        ptr(a_strides, "long long *"), ptr(b_strides, "long long *"), threads)
        return out
