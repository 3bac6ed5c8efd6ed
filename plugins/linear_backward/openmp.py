"""linear's gradients in OpenMP C: the activation's derivative as one pass into a float32 buffer, two products on
the shared GEMM core, and ordered column sums."""

from __future__ import annotations

import torch
from kernelzoo_plugins._gemm.activation import CODES
from kernelzoo_plugins._gemm.openmp import GemmOpenMPImplementation, optional
from kernelzoo_plugins._gemm.spec import rows

from kernelzoo.backends.openmp import ptr
from kernelzoo.registry import Call

from . import gradient_shapes


class LinearBackwardOpenMP(GemmOpenMPImplementation):
    op = "linear_backward"
    cdef = ("int linear_backward(const float *g, long long sgm, long long sgn, const float *x, long long sxm, "
            "long long sxk, const float *w, long long swn, long long swk, float *gx, float *gw, float *gb, "
            "long long m, long long n, long long k, long long mc, long long nc, long long kc, int threads, int act, "
            "const float *pre, long long spm, long long spn);")

    def run(self, call: Call, config: dict) -> tuple[torch.Tensor, ...]:
        g2, x2, w = rows(call.inputs["grad_out"]), rows(call.inputs["x"]), call.inputs["weight"]
        outs = tuple(call.empty(shape) for shape in gradient_shapes(call))
        gb = outs[2] if call.params["bias"] else None
        (m, k), n = x2.shape, w.shape[0]
        pre = call.inputs.get("pre")
        p2 = rows(pre) if pre is not None else None
        rc = self.gemm_library(config).linear_backward(
            ptr(g2), g2.stride(0), g2.stride(1), ptr(x2), x2.stride(0), x2.stride(1), ptr(w), w.stride(0),
            w.stride(1), ptr(outs[0]), ptr(outs[1]), optional(gb), m, n, k, *self.blocking(config),
            CODES[call.params.get("activation")], optional(p2), *(p2.stride() if p2 is not None else (0, 0)))
        if rc != 0:
            raise MemoryError(f"linear_backward: cannot allocate the packing buffers for {call.describe()}")
        return outs
