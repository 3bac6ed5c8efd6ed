"""matmul in OpenMP C on the shared GEMM core (plugins/linear/gemm_openmp.h, as linear and conv2d): a
cache-blocked float32 GEMM with packed tiles and a register-tiled micro-kernel, batched.

On a 2-core AMD EPYC (Zen 4, AVX-512, gcc 13) with the default config, against torch (MKL) in the
same run: 97 vs 100 GFLOP/s at 1024³ on one thread, ~187 vs ~200 at 512³ and 1024³ on two, about
even on 8×256³ (the machine was shared while measuring: ratios are good to ±10%). On a 2-core Intel
Xeon (AVX-512, 2026-11-26): 0.80-0.84× torch (docs/perf/matmul.md).
"""

from __future__ import annotations

import torch

from kernelzoo.backends.openmp import OpenMPImplementation, ptr, thread_counts
from kernelzoo.registry import Call

from . import batched, output_shape


class MatmulOpenMP(OpenMPImplementation):
    op = "matmul"
    cdef = ("int matmul(const float *a, const float *b, float *c, long long batch, long long m, "
            "long long n, long long k, long long sab, long long sam, long long sak, long long sbb, "
            "long long sbk, long long sbn, long long mc, long long nc, long long kc, int threads);")
    # MR×NR: the register tile, compile-time (6×32 is 12 zmm accumulators with AVX-512; on AVX2, 6×16
    # is 12 ymm). MR = 8 measured no better on the AMD EPYC; on an AVX-512 Intel Xeon (2 cores,
    # 2026-11-26) 8×32 with mc 192 ran 1024³ at 350-357 GFLOP/s against 319-335 for the default.
    # mc×kc: the packed A block kept in L2; kc×nc: the packed B block (L3), each B panel kc×NR streamed
    # from L1. 144 points with 2 threads.
    config_space = {"MR": [6, 8], "NR": [16, 32], "mc": [48, 96, 192], "kc": [128, 256, 512], "nc": [512, 4096],
                    "threads": thread_counts()}
    default_config = {"MR": 6, "NR": 32, "mc": 96, "kc": 256, "nc": 4096, "threads": thread_counts()[-1]}

    def run(self, call: Call, config: dict) -> torch.Tensor:
        a3, b3, batch = batched(call)
        out = call.empty(output_shape(call))
        if out.numel() == 0:
            return out
        (_, m, k), n = a3.shape, b3.shape[-1]
        # a batch of 1 broadcasts: batch stride 0
        sab = a3.stride(0) if a3.shape[0] > 1 else 0
        sbb = b3.stride(0) if b3.shape[0] > 1 else 0
        lib = self.library(MR=config["MR"], NR=config["NR"])
        rc = lib.matmul(ptr(a3), ptr(b3), ptr(out), batch, m, n, k, sab, a3.stride(1), a3.stride(2),
                        sbb, b3.stride(1), b3.stride(2), config["mc"], config["nc"], config["kc"],
                        config["threads"])
        if rc != 0:
            raise MemoryError(f"matmul: cannot allocate the packing buffers for {call.describe()}")
        return out
