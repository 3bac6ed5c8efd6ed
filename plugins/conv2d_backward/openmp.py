"""conv2d's gradients in OpenMP C: grad_x an implicit GEMM on the shared GEMM core (a transposed-conv gather),
grad_weight its own driver on the core's micro-kernel (tasks of tap columns, x packed straight into panels,
the images summed in order), and ordered bias sums."""

from __future__ import annotations

import torch
from kernelzoo_plugins._gemm.conv import batched, conv_shape
from kernelzoo_plugins._gemm.openmp import GemmOpenMPImplementation, optional

from kernelzoo.backends.openmp import ptr
from kernelzoo.registry import Call

from . import gradient_shapes


class Conv2dBackwardOpenMP(GemmOpenMPImplementation):
    op = "conv2d_backward"
    cdef = ("int conv2d_backward(const float *g, const float *x, const float *wt, float *gx, float *gw, float *gb, "
            "long long n, long long c, long long h, long long wd, long long k, long long r, long long s, long long oh, "
            "long long ow, long long sh, long long sw, long long ph, long long pw, long long dh, long long dw, "
            "long long mc, long long nc, long long kc, int threads);")

    def run(self, call: Call, config: dict) -> tuple[torch.Tensor, ...]:
        cs = conv_shape(call)
        outs = tuple(call.empty(shape) for shape in gradient_shapes(call))
        g, x = batched(call.inputs["grad_out"]).contiguous(), batched(call.inputs["x"]).contiguous()
        wt = call.inputs["weight"].transpose(0, 1).contiguous()  # (C, K, R, S): grad_x's A, rows c
        gb = outs[2] if call.params["bias"] else None
        rc = self.gemm_library(config).conv2d_backward(
            ptr(g), ptr(x), ptr(wt), ptr(outs[0]), ptr(outs[1]), optional(gb), cs.n, cs.c, cs.h, cs.w, cs.k,
            cs.r, cs.s, cs.oh, cs.ow, *cs.stride, *cs.padding, *cs.dilation, *self.blocking(config))
        if rc != 0:
            raise MemoryError(f"conv2d_backward: cannot allocate the packing buffers for {call.describe()}")
        return outs
