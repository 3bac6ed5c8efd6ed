"""linear in OpenMP C: the shared cache-blocked GEMM (gemm_openmp.h) with the bias fused into its stores.

GemmOpenMPImplementation is the base of every openmp plugin on that GEMM (linear, linear_backward,
conv2d, conv2d_backward, matmul): their C sources ``#include`` it, and they share its config space (matmul's
is wider).
"""

from __future__ import annotations

from typing import Any

import cffi
import torch

from kernelzoo.backends.openmp import OpenMPImplementation, ptr, thread_counts
from kernelzoo.registry import Call

from . import rows

NULL = cffi.FFI().NULL


class GemmOpenMPImplementation(OpenMPImplementation):
    """An openmp plugin whose C source includes gemm_openmp.h."""

    # MR×NR: the register tile (compile-time; NR a multiple of 16 floats); mc×kc: the packed A block kept
    # in L2, kc×nc: the packed B block (L3), each B panel kc×NR streamed from L1
    config_space = {"MR": [6, 8], "NR": [16, 32], "mc": [48, 96, 192], "kc": [256, 512], "nc": [1024, 4096],
                    "threads": thread_counts()}
    default_config = {"MR": 6, "NR": 32, "mc": 96, "kc": 256, "nc": 4096, "threads": thread_counts()[-1]}

    def gemm_library(self, config: dict) -> Any:
        return self.library(MR=config["MR"], NR=config["NR"])

    @staticmethod
    def blocking(config: dict) -> tuple[int, int, int, int]:
        """(mc, nc, kc, threads): the run-time arguments every gemm entry point ends with."""
        return config["mc"], config["nc"], config["kc"], config["threads"]


def optional(t: torch.Tensor | None) -> Any:
    """A float pointer to ``t``'s memory, or NULL."""
    return ptr(t) if t is not None else NULL


class LinearOpenMP(GemmOpenMPImplementation):
    op = "linear"
    cdef = ("int linear(const float *x, long long sxm, long long sxk, const float *w, long long swn, long long swk, "
            "const float *bias, float *y, long long m, long long n, long long k, long long mc, long long nc, "
            "long long kc, int threads);")

    def run(self, call: Call, config: dict) -> torch.Tensor:
        x, w, bias = call.inputs["x"], call.inputs["weight"], call.inputs.get("bias")
        x2 = rows(x)
        out = call.empty((*x.shape[:-1], w.shape[0]))
        if out.numel() == 0:
            return out
        bias = bias.contiguous() if bias is not None else None
        rc = self.gemm_library(config).linear(
            ptr(x2), x2.stride(0), x2.stride(1), ptr(w), w.stride(0), w.stride(1), optional(bias), ptr(out),
            x2.shape[0], w.shape[0], w.shape[1], *self.blocking(config))
        if rc != 0:
            raise MemoryError(f"linear: cannot allocate the packing buffers for {call.describe()}")
        return out
