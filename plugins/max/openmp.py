"""max in OpenMP C: rows (inner = 1) or column tiles in parallel, blocks of a row reduced in vector lanes; a
few long rows or tiles are split across the threads and merged in thread order (see openmp.c)."""

from __future__ import annotations

import torch

from kernelzoo.backends.openmp import OpenMPImplementation, ptr, thread_counts
from kernelzoo.registry import Call

from . import as_3d, index_output

_TILE = 256  # openmp.c's TILE


class MaxOpenMP(OpenMPImplementation):
    op = "max"
    cdef = """
    void max_rows(const float *x, float *values, long long *indices, long long outer, long long reduced,
                  int threads, float *part_v, long long *part_i);
    void max_cols(const float *x, float *values, long long *indices, long long outer, long long reduced,
                  long long inner, int threads, float *part_v, long long *part_i);
    """
    config_space = {"threads": thread_counts()}
    default_config = {"threads": thread_counts()[-1]}

    def run(self, call: Call, config: dict) -> tuple[torch.Tensor, torch.Tensor]:
        p = call.op.plan(call)
        values, indices = call.empty(p.out_shape), index_output(call, p.out_shape)
        if values.numel() == 0:
            return values, indices
        x3 = as_3d(call.inputs["x"], p)  # (outer, reduced, inner)
        threads = config["threads"]
        if p.inner == 1:
            parts = threads
            args = (p.outer, p.reduced)
        else:
            split = p.outer * -(-p.inner // _TILE) < threads
            parts = threads * p.outer * p.inner if split else 1
            args = (p.outer, p.reduced, p.inner)
        part_v, part_i = torch.empty(parts, dtype=torch.float32), torch.empty(parts, dtype=torch.int64)
        kernel = self._lib.max_rows if p.inner == 1 else self._lib.max_cols
        kernel(ptr(x3), ptr(values), ptr(indices, "long long *"), *args, threads, ptr(part_v),
               ptr(part_i, "long long *"))
        return values, indices
