"""max_pool2d in OpenMP C: a parallel loop over planes and output rows, each window scanned as torch does."""

from __future__ import annotations

import torch
from kernelzoo_plugins._gemm.conv import batched

from kernelzoo.backends.openmp import OpenMPImplementation, ptr, thread_counts
from kernelzoo.registry import Call

from . import index_output, pooled_shape


class MaxPool2dOpenMP(OpenMPImplementation):
    op = "max_pool2d"
    cdef = ("void max_pool2d(const float *x, float *out, long long *indices, long long planes, long long h, "
            "long long w, long long oh, long long ow, long long kh, long long kw, long long sh, long long sw, "
            "long long ph, long long pw, int threads);")
    config_space = {"threads": thread_counts()}
    default_config = {"threads": thread_counts()[-1]}

    def run(self, call: Call, config: dict) -> tuple[torch.Tensor, torch.Tensor]:
        x = batched(call.inputs["x"]).contiguous()
        shape = pooled_shape(call.inputs["x"].shape, call.params)
        out, indices = call.empty(shape), index_output(call, shape)
        if out.numel():
            n, c, h, w = x.shape
            self.library().max_pool2d(ptr(x), ptr(out), ptr(indices, "long long *"), n * c, h, w, *shape[-2:],
                                      *call.params["kernel_size"], *call.params["stride"], *call.params["padding"],
                                      config["threads"])
        return out, indices
