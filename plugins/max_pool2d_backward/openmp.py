"""max_pool2d's gradient in OpenMP C: planes in parallel, each a scatter of its outputs in order."""

from __future__ import annotations

import math

import torch

from kernelzoo.backends.openmp import OpenMPImplementation, ptr, thread_counts
from kernelzoo.errors import ArgumentError
from kernelzoo.registry import Call


class MaxPool2dBackwardOpenMP(OpenMPImplementation):
    op = "max_pool2d_backward"
    cdef = ("long long max_pool2d_backward(const float *g, const long long *indices, float *gx, long long planes, "
            "long long hw, long long outputs, int threads);")
    config_space = {"threads": thread_counts()}
    default_config = {"threads": thread_counts()[-1]}

    def run(self, call: Call, config: dict) -> torch.Tensor:
        g, indices = call.inputs["grad_out"].contiguous(), call.inputs["indices"].contiguous()
        shape = call.params["input_shape"]
        out = call.empty(shape)
        planes, hw = math.prod(shape[:-2]), shape[-2] * shape[-1]
        if out.numel() == 0:
            return out
        bad = self.library().max_pool2d_backward(ptr(g), ptr(indices, "long long *"), ptr(out), planes, hw,
                                                 g.numel() // max(planes, 1), config["threads"])
        if bad:
            raise ArgumentError(f"max_pool2d_backward: {bad} indices fall outside their {shape[-2]}×{shape[-1]} "
                                "plane; expected max_pool2d's own indices")
        return out
