"""matmul in OpenMP C on the shared GEMM core (plugins/_gemm/gemm_openmp.h, as linear and conv2d): a
cache-blocked float32 GEMM with packed tiles and a register-tiled micro-kernel, batched. On a 2-core Intel
Xeon (AVX-512, 2026-11-26), 0.76-0.88× torch's MKL (docs/perf/matmul.md).
"""

from __future__ import annotations

import torch
from kernelzoo_plugins._gemm.openmp import GemmOpenMPImplementation

from kernelzoo.backends.openmp import ptr, thread_counts
from kernelzoo.registry import Call

from . import batched, output_shape


class MatmulOpenMP(GemmOpenMPImplementation):
    op = "matmul"
    cdef = ("int matmul(const float *a, const float *b, float *c, long long batch, long long m, "
            "long long n, long long k, long long sab, long long sam, long long sak, long long sbb, "
            "long long sbk, long long sbn, long long mc, long long nc, long long kc, int threads);")
    # the core's space plus kc 128 and nc 512, which matmul's space had before it moved onto the core
    # (144 points with 2 threads); the default is the core's
    config_space = {"MR": [6, 8], "NR": [16, 32], "mc": [48, 96, 192], "kc": [128, 256, 512], "nc": [512, 4096],
                    "threads": thread_counts()}

    def run(self, call: Call, config: dict) -> torch.Tensor:
        a3, b3, batch = batched(call)
        out = call.empty(output_shape(call))
        if out.numel() == 0:
            return out
        (_, m, k), n = a3.shape, b3.shape[-1]
        # a batch of 1 broadcasts: batch stride 0
        sab = a3.stride(0) if a3.shape[0] > 1 else 0
        sbb = b3.stride(0) if b3.shape[0] > 1 else 0
        rc = self.gemm_library(config).matmul(ptr(a3), ptr(b3), ptr(out), batch, m, n, k, sab, a3.stride(1),
                                              a3.stride(2), sbb, b3.stride(1), b3.stride(2), *self.blocking(config))
        if rc != 0:
            raise MemoryError(f"matmul: cannot allocate the packing buffers for {call.describe()}")
        return out
