"""The GEMM family's OpenMP base: every openmp plugin whose C source includes gemm_openmp.h (linear,
linear_backward, conv2d, conv2d_backward, matmul) shares its config space (matmul's is wider)."""

from __future__ import annotations

from typing import Any

import cffi
import torch

from kernelzoo.backends.openmp import OpenMPImplementation, ptr, thread_counts

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
