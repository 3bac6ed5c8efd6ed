"""linear in OpenMP C: the shared cache-blocked GEMM (gemm_openmp.h) with the bias and the activation fused into
its stores (with ``pre``: z stored, then one pass for y = act(z)).

GemmOpenMPImplementation is the base of every openmp plugin on that GEMM (linear, linear_backward,
conv2d, conv2d_backward, matmul): their C sources ``#include`` it, and they share its config space (matmul's
is wider).
"""

from __future__ import annotations

import torch
from kernelzoo_plugins._gemm.activation import CODES
from kernelzoo_plugins._gemm.openmp import GemmOpenMPImplementation, optional

from kernelzoo.backends.openmp import ptr
from kernelzoo.registry import Call

from . import rows


class LinearOpenMP(GemmOpenMPImplementation):
    op = "linear"
    cdef = ("int linear(const float *x, long long sxm, long long sxk, const float *w, long long swn, long long swk, "
            "const float *bias, float *y, long long m, long long n, long long k, long long mc, long long nc, "
            "long long kc, int threads, int act, float *z);")

    def run(self, call: Call, config: dict) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
        x, w, bias = call.inputs["x"], call.inputs["weight"], call.inputs.get("bias")
        x2 = rows(x)
        shape = (*x.shape[:-1], w.shape[0])
        out = call.empty(shape)
        pre = call.empty(shape) if call.params.get("pre") else None
        if out.numel():
            bias = bias.contiguous() if bias is not None else None
            rc = self.gemm_library(config).linear(
                ptr(x2), x2.stride(0), x2.stride(1), ptr(w), w.stride(0), w.stride(1), optional(bias), ptr(out),
                x2.shape[0], w.shape[0], w.shape[1], *self.blocking(config), CODES[call.params.get("activation")],
                optional(pre))
            if rc != 0:
                raise MemoryError(f"linear: cannot allocate the packing buffers for {call.describe()}")
        return out if pre is None else (out, pre)
