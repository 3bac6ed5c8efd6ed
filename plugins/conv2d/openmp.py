"""conv2d in OpenMP C: an implicit GEMM per image on the shared GEMM core, im2col gathered while packing."""

from __future__ import annotations

import torch
from kernelzoo_plugins._gemm.openmp import GemmOpenMPImplementation, optional

from kernelzoo.backends.openmp import ptr
from kernelzoo.registry import Call

from . import batched, conv_shape, output_shape


class Conv2dOpenMP(GemmOpenMPImplementation):
    op = "conv2d"
    cdef = ("int conv2d(const float *x, const float *w, const float *bias, float *out, long long n, long long c, "
            "long long h, long long wd, long long k, long long r, long long s, long long oh, long long ow, "
            "long long sh, long long sw, long long ph, long long pw, long long dh, long long dw, long long mc, "
            "long long nc, long long kc, int threads);")

    def run(self, call: Call, config: dict) -> torch.Tensor:
        cs, out = conv_shape(call), call.empty(output_shape(call))
        if out.numel() == 0:
            return out
        x, w = batched(call.inputs["x"]).contiguous(), call.inputs["weight"].contiguous()
        bias = call.inputs.get("bias")
        bias = bias.contiguous() if bias is not None else None
        rc = self.gemm_library(config).conv2d(
            ptr(x), ptr(w), optional(bias), ptr(out), cs.n, cs.c, cs.h, cs.w, cs.k, cs.r, cs.s, cs.oh, cs.ow,
            *cs.stride, *cs.padding, *cs.dilation, *self.blocking(config))
        if rc != 0:
            raise MemoryError(f"conv2d: cannot allocate the packing buffers for {call.describe()}")
        return out
