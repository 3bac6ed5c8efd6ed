"""copy_ in OpenMP C: a vectorised loop for dense dst and src of one shape, else a strided walk over
the merged layout (dst's dimensions in its memory order, src broadcast at stride 0)."""

from __future__ import annotations

import torch

from kernelzoo.backends.openmp import OpenMPImplementation, ptr, thread_counts
from kernelzoo.registry import Call

from . import copy_parts


class CopyOpenMP(OpenMPImplementation):
    op = "copy_"
    cdef = """
        void copy_contiguous(float *dst, const float *src, long long n, int threads);
        void copy_strided(float *dst, const float *src, int ndim, const long long *sizes,
                          const long long *dst_strides, const long long *src_strides, int threads);
    """
    config_space = {"threads": thread_counts()}
    default_config = {"threads": thread_counts()[-1]}

    def run(self, call: Call, config: dict) -> torch.Tensor:
        lib, threads = self.library(), config["threads"]
        for dst, src, plan in copy_parts(call.inputs["dst"], call.inputs["src"]):
            if dst.numel() == 0:
                continue
            if plan.contiguous:
                lib.copy_contiguous(ptr(dst), ptr(src), dst.numel(), threads)
                continue
            # (ndim,) int64 arrays, alive across the call
            sizes, dst_strides, src_strides = (torch.tensor(v, dtype=torch.int64)
                                               for v in (plan.sizes, plan.a_strides, plan.b_strides))
            lib.copy_strided(ptr(dst), ptr(src), len(plan.sizes), ptr(sizes, "long long *"),
                             ptr(dst_strides, "long long *"), ptr(src_strides, "long long *"), threads)
        return call.inputs["dst"]
