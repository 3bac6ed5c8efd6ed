"""cross_entropy in OpenMP C: rows in parallel, each in two vectorised passes (max; exp-sum and sum), the
reduction over rows in order."""

from __future__ import annotations

import torch

from kernelzoo.backends.openmp import OpenMPImplementation, ptr, thread_counts
from kernelzoo.registry import Call

from . import REDUCTIONS, as_rows


class CrossEntropyOpenMP(OpenMPImplementation):
    op = "cross_entropy"
    cdef = """
    void ce_fwd(const float *x, const long long *target, float *loss, float *lse, long long rows, long long c,
                long long x_stride, long long ignore_index, float smoothing, int reduction, float *total,
                int threads);
    """
    config_space = {"threads": thread_counts()}
    default_config = {"threads": thread_counts()[-1]}

    def run(self, call: Call, config: dict) -> tuple[torch.Tensor, torch.Tensor]:
        target, p = call.inputs["target"], call.params
        x2d = as_rows(call.inputs["logits"])  # (rows, c), class stride 1
        t = target.reshape(-1).contiguous()
        rows, classes = x2d.shape
        reduction = REDUCTIONS.index(p["reduction"])
        loss = call.empty((rows,)) if reduction == 0 else torch.empty(rows, dtype=torch.float32)
        lse = call.empty((rows,), torch.float32)
        total = call.empty(())
        self._lib.ce_fwd(ptr(x2d), ptr(t, "long long *"), ptr(loss), ptr(lse), rows, classes, x2d.stride(0),
                         p["ignore_index"], p["label_smoothing"], reduction, ptr(total), config["threads"])
        return (loss.view(target.shape) if reduction == 0 else total), lse.view(target.shape)
