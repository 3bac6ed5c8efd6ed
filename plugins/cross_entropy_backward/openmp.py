"""cross_entropy_backward in OpenMP C: rows in parallel, one vectorised pass each."""

from __future__ import annotations

import torch
from kernelzoo_plugins._rows.cross_entropy import REDUCTIONS, from_rows

from kernelzoo.backends.openmp import OpenMPImplementation, ptr, thread_counts
from kernelzoo.registry import Call

from . import rows_of


class CrossEntropyBackwardOpenMP(OpenMPImplementation):
    op = "cross_entropy_backward"
    cdef = """
    void ce_bwd(const float *x, const long long *target, const float *lse, const float *grad, float *out,
                long long rows, long long c, long long x_stride, long long ignore_index, float smoothing,
                int reduction, int threads);
    """
    config_space = {"threads": thread_counts()}
    default_config = {"threads": thread_counts()[-1]}

    def run(self, call: Call, config: dict) -> torch.Tensor:
        x2d, target, lse = rows_of(call)
        p = call.params
        rows, classes = x2d.shape
        grad = call.inputs["grad_loss"].reshape(-1).contiguous()
        out = call.empty((rows, classes))
        self._lib.ce_bwd(ptr(x2d), ptr(target, "long long *"), ptr(lse), ptr(grad), ptr(out), rows, classes,
                         x2d.stride(0), p["ignore_index"], p["label_smoothing"], REDUCTIONS.index(p["reduction"]),
                         config["threads"])
        return from_rows(out, call.inputs["logits"])
