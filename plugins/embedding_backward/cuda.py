"""embedding_backward in raw CUDA, compiled by NVRTC: the positions sorted by index on the device (torch.sort,
stable), then a block per table row adds its positions' gradient rows in order, 16-byte packs per thread."""

from __future__ import annotations

import torch

from kernelzoo.backends.cuda import I64, CudaImplementation
from kernelzoo.errors import UnsupportedError
from kernelzoo.registry import Call

from . import grad_rows, sorted_rows


class EmbeddingBackwardCuda(CudaImplementation):
    op = "embedding_backward"
    config_space = {"THREADS": [64, 128, 256, 512, 1024]}
    default_config = {"THREADS": 256}

    def run(self, call: Call, config: dict) -> torch.Tensor:
        g, dim, num_weights = grad_rows(call)
        p = call.params
        if num_weights >= 1 << 31 or dim >= 1 << 31:
            raise UnsupportedError(f"embedding_backward/cuda: fewer than 2^31 rows and columns, got {num_weights} x "
                                   f"{dim}")
        out = call.empty((num_weights, dim))
        if dim:
            order, starts = sorted_rows(call.inputs["indices"], num_weights)
            size = g.element_size()
            vec = dim * size % 16 == 0 and g.stride(0) * size % 16 == 0 and g.data_ptr() % 16 == 0 \
                and out.data_ptr() % 16 == 0
            packs = dim // (16 // size) if vec else dim
            block = min(config["THREADS"], max(32, (packs + 31) // 32 * 32))
            padding = -1 if p["padding_idx"] is None else p["padding_idx"]
            self.kernel("emb_owner_vec" if vec else "emb_owner_scalar", g.dtype, config)(
                g, order, starts, out, dim, I64(g.stride(0)), I64(padding), grid=num_weights, block=block)
        return out
