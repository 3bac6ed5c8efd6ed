"""aten.embedding_dense_backward (what F.embedding's autograd runs): the baseline. On the GPU it sorts the
indices and reduces each run of equal ones; on the CPU it adds sequentially."""

from __future__ import annotations

import torch

from kernelzoo.registry import Call, Implementation


class EmbeddingBackwardTorch(Implementation):
    op = "embedding_backward"
    plugin = "torch"
    # float32 only on the CPU: there torch adds float16 / bfloat16 rows in their own precision (a row hit 3
    # times was off by 7 fp16 units), not in float32 as the op does
    # float32 only: torch's fp16/bf16 embedding backward accumulates in the half type, which misses the op's
    # tolerance in every fp16/bf16 conformance case on the GPU
    dtypes = {"cpu": (torch.float32,), "cuda": (torch.float32,)}

    def run(self, call: Call, config: dict) -> torch.Tensor:
        p = call.params
        padding = -1 if p["padding_idx"] is None else p["padding_idx"]
        return torch.ops.aten.embedding_dense_backward(call.inputs["grad_output"], call.inputs["indices"],
                                                       p["num_weights"], padding, False)
