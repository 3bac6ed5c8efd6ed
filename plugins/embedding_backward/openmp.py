"""embedding_backward in OpenMP C: a counting sort of the indices, then table rows in parallel, each summed in
index-position order by one thread (deterministic, no atomics, no zero-fill pass)."""

from __future__ import annotations

import torch

from kernelzoo.backends.openmp import OpenMPImplementation, ptr, thread_counts
from kernelzoo.registry import Call

from . import grad_rows

_NONE = torch.empty(0, dtype=torch.int64)  # its data pointer is NULL


class EmbeddingBackwardOpenMP(OpenMPImplementation):
    op = "embedding_backward"
    cdef = """
    void embedding_bwd(const float *g, long long g_stride, const long long *idx64, const int *idx32, float *out,
                       long long n, long long dim, long long num_weights, long long padding_idx, int threads,
                       long long *starts, long long *next, long long *order);
    """
    config_space = {"threads": thread_counts()}
    default_config = {"threads": thread_counts()[-1]}

    def run(self, call: Call, config: dict) -> torch.Tensor:
        g, dim, num_weights = grad_rows(call)
        p = call.params
        idx = call.inputs["indices"].reshape(-1).contiguous()
        n = idx.numel()
        out = call.empty((num_weights, dim))
        idx64, idx32 = (idx, _NONE) if idx.dtype == torch.int64 else (_NONE, idx)
        scratch = torch.empty(2 * num_weights + 1 + n, dtype=torch.int64)  # starts, next, order
        starts, rest = scratch[:num_weights + 1], scratch[num_weights + 1:]
        padding = -1 if p["padding_idx"] is None else p["padding_idx"]
        self._lib.embedding_bwd(ptr(g), g.stride(0) if n else 0, ptr(idx64, "long long *"), ptr(idx32, "int *"),
                                ptr(out), n, dim, num_weights, padding, config["threads"], ptr(starts, "long long *"),
                                ptr(rest[:num_weights], "long long *"), ptr(rest[num_weights:], "long long *"))
        return out
