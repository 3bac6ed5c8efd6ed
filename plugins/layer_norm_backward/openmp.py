"""layer_norm_backward in OpenMP C: contiguous row ranges per thread (two passes per row, the next rows
prefetched, grad_x streamed past the caches when large), per-thread partial grad_weight / grad_bias rows added
in thread order."""

from __future__ import annotations

import torch

from kernelzoo.backends.openmp import OpenMPImplementation, ptr, thread_counts
from kernelzoo.registry import Call

from . import rows_of

_NONE = torch.empty(0)  # its data pointer is NULL


class LayerNormBackwardOpenMP(OpenMPImplementation):
    op = "layer_norm_backward"
    cdef = """
    int layer_norm_bwd(const float *dy, const float *x, const float *mean, const float *rstd, const float *w,
                       float *dx, float *dw, float *db, long long rows, long long n, long long dy_stride,
                       long long x_stride, long long stream_min, int threads);
    """
    # stream_min: grad_x is written with streaming stores from this many elements on (8 MB by default: see
    # openmp.c; 0 streams always, which the conformance cases' first config runs)
    config_space = {"threads": thread_counts(), "stream_min": [0, 1 << 21, 1 << 62]}
    default_config = {"threads": thread_counts()[-1], "stream_min": 1 << 21}

    def run(self, call: Call, config: dict) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        dy, x, mean, rstd, n = rows_of(call)
        rows, shape, threads = x.shape[0], call.params["normalized_shape"], config["threads"]
        dx, dw, db = call.empty((rows, n)), call.empty((n,)), call.empty((n,))
        if n and not rows:
            dw.zero_(), db.zero_()  # sums of no rows
        elif n:
            w = call.inputs["weight"].contiguous() if "weight" in call.inputs else _NONE
            rc = self._lib.layer_norm_bwd(ptr(dy), ptr(x), ptr(mean), ptr(rstd), ptr(w), ptr(dx), ptr(dw), ptr(db),
                                          rows, n, dy.stride(0), x.stride(0), config["stream_min"], threads)
            if rc != 0:
                raise MemoryError(f"layer_norm_backward: cannot allocate the partial sums for {call.describe()}")
        return dx.view(call.inputs["x"].shape), dw.view(shape), db.view(shape)
