"""gelu in OpenMP C: one parallel loop over the contiguous input, on vectorised exp and erfc."""

from __future__ import annotations

import torch

from kernelzoo.backends.openmp import OpenMPImplementation, ptr, thread_counts
from kernelzoo.registry import Call


class GeluOpenMP(OpenMPImplementation):
    op = "gelu"
    cdef = """
        void gelu_erf(const float *x, float *y, long long n, int threads);
        void gelu_tanh(const float *x, float *y, long long n, int threads);
    """
    config_space = {"threads": thread_counts()}
    default_config = {"threads": thread_counts()[-1]}

    def run(self, call: Call, config: dict) -> torch.Tensor:
        x = call.inputs["x"].contiguous()
        y = call.empty(x.shape)
        kernel = self.library().gelu_tanh if call.params["approximate"] == "tanh" else self.library().gelu_erf
        kernel(ptr(x), ptr(y), x.numel(), config["threads"])
        return y
