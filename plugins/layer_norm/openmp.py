"""layer_norm in OpenMP C: runs of rows in parallel, each row in two vectorised passes (shifted sums, then
normalise), a thread's next row summed in the loop that normalises this one."""

from __future__ import annotations

import math
from typing import Any

import torch

from kernelzoo.backends.openmp import OpenMPImplementation, ptr, thread_counts
from kernelzoo.registry import Call

from . import as_rows, stats_shape

_NONE = torch.empty(0)  # its data pointer is NULL


def optional_ptr(t: torch.Tensor | None) -> Any:
    """A pointer to t's memory, NULL for None."""
    return ptr(t if t is not None else _NONE)


class LayerNormOpenMP(OpenMPImplementation):
    op = "layer_norm"
    cdef = """
    void layer_norm_fwd(const float *x, const float *w, const float *b, float *y, float *mean, float *rstd,
                        long long rows, long long n, long long x_stride, float eps, int threads);
    """
    config_space = {"threads": thread_counts()}
    default_config = {"threads": thread_counts()[-1]}

    def run(self, call: Call, config: dict) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        x, shape = call.inputs["x"], call.params["normalized_shape"]
        n = math.prod(shape)
        # The outputs in their final shapes: no views to make afterwards (a view costs microseconds on the CPU)
        y = call.empty(x.shape)
        stats = stats_shape(x, shape)
        mean, rstd = call.empty(stats, torch.float32), call.empty(stats, torch.float32)
        if n == 0:
            mean.fill_(math.nan), rstd.fill_(math.nan)
        elif y.numel():
            # (rows, n) with column stride 1: x itself when contiguous, else a view or a copy
            x2d = x if x.is_contiguous() else as_rows(x, n)
            w, b = call.inputs.get("weight"), call.inputs.get("bias")
            w, b = (t.contiguous() if t is not None else None for t in (w, b))
            self._lib.layer_norm_fwd(ptr(x2d), optional_ptr(w), optional_ptr(b), ptr(y), ptr(mean), ptr(rstd),
                                     y.numel() // n, n, n if x2d is x else x2d.stride(0), call.params["eps"],
                                     config["threads"])
        return y, mean, rstd
