"""sum and mean in OpenMP C (sum_openmp.c): rows (inner = 1) or column tiles in parallel, each summed in
float chunks gathered in a double; a few long rows or tiles are split across the threads."""

from __future__ import annotations

from pathlib import Path

import torch
from kernelzoo_plugins._reduce.plan import as_3d

from kernelzoo.backends.openmp import OpenMPImplementation, ptr, thread_counts
from kernelzoo.registry import Call

_TILE = 256  # sum_openmp.c's TILE


class SummationOpenMP(OpenMPImplementation):
    """Base of sum's and mean's openmp plugins: sum_openmp.c, the op's scale passed in."""

    sources = ("sum_openmp.c",)
    cdef = """
    void sum_rows(const float *x, float *out, long long outer, long long reduced, float scale, int threads,
                  double *partial);
    void sum_cols(const float *x, float *out, long long outer, long long reduced, long long inner, float scale,
                  int threads, double *partial);
    """
    config_space = {"threads": thread_counts()}
    default_config = {"threads": thread_counts()[-1]}

    def run(self, call: Call, config: dict) -> torch.Tensor:
        p = call.op.plan(call)
        x3 = as_3d(call.inputs["x"], p)  # (outer, reduced, inner)
        out = call.empty((p.outer, p.inner))
        threads, scale = config["threads"], call.op.scale(call)
        if out.numel() == 0:
            return out.view(p.out_shape)
        if p.inner == 1:
            partial = torch.empty(threads, dtype=torch.float64)
            self._lib.sum_rows(ptr(x3), ptr(out), p.outer, p.reduced, scale, threads, ptr(partial, "double *"))
        else:
            tiles = p.outer * -(-p.inner // _TILE)
            partial = torch.empty(threads * p.outer * p.inner if tiles < threads else 1, dtype=torch.float64)
            self._lib.sum_cols(ptr(x3), ptr(out), p.outer, p.reduced, p.inner, scale, threads,
                               ptr(partial, "double *"))
        return out.view(p.out_shape)

    def source_dir(self) -> Path:
        return Path(__file__).parent
