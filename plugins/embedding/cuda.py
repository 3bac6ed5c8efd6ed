"""embedding in raw CUDA, compiled by NVRTC: a block per index copies its row in 16-byte packs."""

from __future__ import annotations

import torch

from kernelzoo.backends.cuda import I64, CudaImplementation
from kernelzoo.errors import UnsupportedError
from kernelzoo.registry import Call


class EmbeddingCuda(CudaImplementation):
    op = "embedding"
    config_space = {"THREADS": [64, 128, 256, 512, 1024]}
    default_config = {"THREADS": 256}

    def run(self, call: Call, config: dict) -> torch.Tensor:
        weight, indices = call.inputs["weight"], call.inputs["indices"]
        w = weight if weight.stride(1) == 1 else weight.contiguous()  # rows may be any stride apart
        idx = indices.reshape(-1).contiguous()
        n, dim = idx.numel(), w.shape[1]
        if n >= 1 << 31 or dim >= 1 << 31:
            raise UnsupportedError(f"embedding/cuda: fewer than 2^31 indices and columns, got {n} x {dim}")
        out = call.empty((n, dim))
        if dim:
            size = w.element_size()
            vec = dim * size % 16 == 0 and w.stride(0) * size % 16 == 0 and w.data_ptr() % 16 == 0 \
                and out.data_ptr() % 16 == 0
            packs = dim // (16 // size) if vec else dim
            block = min(config["THREADS"], max(32, (packs + 31) // 32 * 32))
            wide = idx.dtype == torch.int64
            self.kernel("emb_gather_vec" if vec else "emb_gather_scalar", w.dtype, config)(
                w, idx if wide else None, None if wide else idx, out, dim, I64(w.stride(0)), grid=n, block=block)
        return out.view(*indices.shape, dim)
