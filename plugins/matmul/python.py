"""The spec in tensor ops: every product a[m, k]·b[k, n] formed in float32, then summed over k."""

from __future__ import annotations

import torch

from kernelzoo.backends.tensor_ops import PythonImplementation
from kernelzoo.registry import Call

from . import output_shape

# Elements of one (rows, K, N) product tensor: 64 MiB of float32, so memory stays bounded
CHUNK_ELEMENTS = 1 << 24


class MatmulPython(PythonImplementation):
    op = "matmul"

    def run(self, call: Call, config: dict) -> torch.Tensor:
        a, b = call.inputs["a"].float(), call.inputs["b"].float()
        out = call.empty(output_shape(call))
        m, k, n = a.shape[-2], a.shape[-1], b.shape[-1]
        batch = out.shape[0] if out.dim() == 3 else 1
        rows = max(1, CHUNK_ELEMENTS // max(1, batch * k * n))
        for start in range(0, m, rows):
            a_rows = a[..., start:start + rows, :]
            # (..., rows, K, 1) * (..., 1, K, N) -> (..., rows, K, N), summed over K; batches broadcast
            products = a_rows.unsqueeze(-1) * b.unsqueeze(-3)
            out[..., start:start + rows, :] = products.sum(-2)
        return out
