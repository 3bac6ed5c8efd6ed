"""relu in OpenMP C: one parallel, vectorised loop over the contiguous input."""

from __future__ import annotations

import torch

from kernelzoo.backends.openmp import OpenMPImplementation, ptr, thread_counts
from kernelzoo.registry import Call


class ReluOpenMP(OpenMPImplementation):
    op = "relu"
    cdef = "void relu(const float *x, float *y, long long n, int threads);"
    config_space = {"threads": thread_counts()}
    default_config = {"threads": thread_counts()[-1]}

    def run(self, call: Call, config: dict) -> torch.Tensor:
        x = call.inputs["x"].contiguous()
        y = call.empty(x.shape)
        self.library().relu(ptr(x), ptr(y), x.numel(), config["threads"])
        return y
