"""embedding in OpenMP C: index rows in parallel, each copied with memcpy."""

from __future__ import annotations

import torch

from kernelzoo.backends.openmp import OpenMPImplementation, ptr, thread_counts
from kernelzoo.registry import Call

_NONE = torch.empty(0, dtype=torch.int64)  # its data pointer is NULL


class EmbeddingOpenMP(OpenMPImplementation):
    op = "embedding"
    cdef = """
    void embedding_fwd(const float *w, const long long *idx64, const int *idx32, float *out, long long n,
                       long long dim, long long w_stride, int threads);
    """
    config_space = {"threads": thread_counts()}
    default_config = {"threads": thread_counts()[-1]}

    def run(self, call: Call, config: dict) -> torch.Tensor:
        weight, indices = call.inputs["weight"], call.inputs["indices"]
        w = weight if weight.stride(1) == 1 else weight.contiguous()  # rows may be any stride apart
        idx = indices.reshape(-1).contiguous()
        dim = w.shape[1]
        out = call.empty((idx.numel(), dim))
        idx64, idx32 = (idx, _NONE) if idx.dtype == torch.int64 else (_NONE, idx)
        self._lib.embedding_fwd(ptr(w), ptr(idx64, "long long *"), ptr(idx32, "int *"), ptr(out), idx.numel(), dim,
                                w.stride(0), config["threads"])
        return out.view(*indices.shape, dim)
