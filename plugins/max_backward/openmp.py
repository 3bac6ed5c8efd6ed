"""max's gradient in OpenMP C: grad_x zeroed in parallel spans, then every output's grad written at its
index (see openmp.c)."""

from __future__ import annotations

import torch

from kernelzoo.backends.openmp import OpenMPImplementation, ptr, thread_counts
from kernelzoo.errors import ArgumentError
from kernelzoo.registry import Call


class MaxBackwardOpenMP(OpenMPImplementation):
    op = "max_backward"
    cdef = ("long long max_backward(const float *g, const long long *indices, float *grad_x, long long outer, "
            "long long reduced, long long inner, int threads);")
    config_space = {"threads": thread_counts()}
    default_config = {"threads": thread_counts()[-1]}

    def run(self, call: Call, config: dict) -> torch.Tensor:
        p = call.op.plan(call)
        shape = call.params["input_shape"]
        grad_x = call.empty(shape)
        if grad_x.numel() == 0:
            return grad_x
        g, indices = call.inputs["grad"].contiguous(), call.inputs["indices"].contiguous()
        bad = self._lib.max_backward(ptr(g), ptr(indices, "long long *"), ptr(grad_x), p.outer, p.reduced, p.inner,
                                     config["threads"])
        if bad:
            raise ArgumentError(f"max_backward: {bad} indices fall outside [0, {p.reduced}) along dim "
                                f"{call.params['dim']} of {shape}; expected max's own indices")
        return grad_x
