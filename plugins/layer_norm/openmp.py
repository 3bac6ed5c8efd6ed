"""layer_norm in OpenMP C: rows in parallel, each in two vectorised passes (shifted sums, then normalise)."""

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
        x2d = as_rows(x, n)  # (rows, n), column stride 1
        rows = x2d.shape[0]
        y = call.empty((rows, n))
        mean, rstd = call.empty((rows,), torch.float32), call.empty((rows,), torch.float32)
        if n == 0:
            mean.fill_(math.nan), rstd.fill_(math.nan)
        elif rows:
            w, b = call.inputs.get("weight"), call.inputs.get("bias")
            w, b = (t.contiguous() if t is not None else None for t in (w, b))
            self._lib.layer_norm_fwd(ptr(x2d), optional_ptr(w), optional_ptr(b), ptr(y), ptr(mean), ptr(rstd), rows,
                                     n, x2d.stride(0), call.params["eps"], config["threads"])
        stats = stats_shape(x, shape)
        return y.view(x.shape), mean.view(stats), rstd.view(stats)
