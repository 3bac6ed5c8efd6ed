"""The spec in tensor ops: index_add_ of the gradient rows (atomics on the GPU); deterministic: the positions
sorted by index (stable), each index's rows added in order by segment_reduce."""

from __future__ import annotations

import torch

from kernelzoo.backends.tensor_ops import PythonImplementation
from kernelzoo.registry import Call

from . import sorted_rows


class EmbeddingBackwardPython(PythonImplementation):
    op = "embedding_backward"

    def run(self, call: Call, config: dict) -> torch.Tensor:
        grad, indices, p = call.inputs["grad_output"], call.inputs["indices"], call.params
        dim, num_weights = grad.shape[-1], p["num_weights"]
        g = grad.reshape(-1, dim).float()  # (n, dim)
        idx = indices.reshape(-1).long()
        if p["deterministic"]:
            order, starts = sorted_rows(idx, num_weights)
            out = torch.segment_reduce(g[order], "sum", lengths=starts[1:] - starts[:-1], axis=0)
        else:
            out = torch.zeros((num_weights, dim), dtype=torch.float32, device=g.device).index_add_(0, idx, g)
        if p["padding_idx"] is not None:
            out[p["padding_idx"]] = 0.0
        return out.to(grad.dtype)
