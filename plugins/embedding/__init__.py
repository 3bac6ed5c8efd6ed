"""embedding(indices, weight, padding_idx=None): torch.nn.functional.embedding, the forward pass: the
rows of weight (num_weights, dim) picked by indices (int64 or int32, any shape), out[..., :] =
weight[indices[...], :], of shape indices.shape + (dim,) in weight's dtype.

padding_idx (negative counts from the end, as in torch) changes only the backward: that row gets no
gradient. An index outside [0, num_weights) is an ArgumentError, checked on the host before any kernel
(torch's GPU kernel asserts on the device instead). ``kernelzoo.ops.embedding`` records a backward
through embedding_backward when weight requires grad. The op's shape is (num_weights, dim, indices):
"50257x4096x16384" for a GPT-2-sized table and 16384 tokens.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch
from kernelzoo_plugins._embedding.spec import (
    CaseSpec,
    case_indices,
    case_weight,
    check_indices,
    check_padding_idx,
    embedding_bad_cases,
    embedding_cases,
    random_indices,
)

from kernelzoo import ops
from kernelzoo.autograd import contiguous
from kernelzoo.errors import ArgumentError, DTypeError
from kernelzoo.registry import BadCase, Call, Case, Derivative, Op, check_tensor, randn


class Embedding(Op):
    """embedding(indices, weight, padding_idx=None) -> weight[indices]."""

    name = "embedding"
    checks_every_call = True  # the indices' values must be rows of the weight (value_range)
    # the derivative: embedding_backward sums the gradient rows of each index
    derivative = Derivative(
        inputs=("weight",),
        save=lambda call, outputs: {"indices": call.inputs["indices"], "num_weights": call.inputs["weight"].shape[0],
                                    "padding_idx": call.params["padding_idx"]},
        backward=lambda saved, grad: {"weight": ops.embedding_backward(contiguous(grad), saved["indices"],
                                                                  saved["num_weights"], saved["padding_idx"])},
    )
    # (num_weights, dim, indices): GPT-2's vocabulary at dim 4096 and 16384 tokens; Llama 2's at dim 4096
    shapes = {"cuda": [(50257, 4096, 16384), (32000, 4096, 65536)], "cpu": [(50257, 1024, 4096), (32000, 512, 16384)]}

    def check(self, indices: torch.Tensor, weight: torch.Tensor, padding_idx: int | None = None) -> Call:
        check_tensor(self.name, "weight", weight)
        if weight.dim() != 2:
            raise ArgumentError(f"{self.name}: weight must be 2-D (num_weights, dim), got shape {tuple(weight.shape)}")
        check_indices(self.name, indices, weight.shape[0], weight.device)
        return Call(self, {"weight": weight, "indices": indices},
                    {"padding_idx": check_padding_idx(self.name, padding_idx, weight.shape[0])})

    def reference(self, call: Call) -> torch.Tensor:
        return call.inputs["weight"].double()[call.inputs["indices"]]

    def example(self, shape: Sequence[int], dtype: torch.dtype, device: torch.device | str,
                generator: torch.Generator | None = None, **params: Any) -> Call:
        """A (num_weights, dim) table and ``indices`` random indices into it."""
        num_weights, dim, n = shape
        weight = randn((num_weights, dim), device, dtype, generator)
        return self.check(random_indices((n,), num_weights, device, generator), weight, **params)

    def sizes(self, call: Call) -> dict[str, int]:
        w = call.inputs["weight"]
        return {"num_weights": w.shape[0], "dim": w.shape[1], "indices": call.inputs["indices"].numel()}

    def flops(self, call: Call) -> float:
        return 0.0

    def bytes(self, call: Call) -> float:
        s, w, i = self.sizes(call), call.inputs["weight"], call.inputs["indices"]
        return float(2 * s["indices"] * s["dim"] * w.element_size() + i.numel() * i.element_size())

    def cases(self) -> list[Case]:
        return embedding_cases(_forward_case)

    def bad_cases(self) -> list[BadCase]:
        i = torch.tensor([0, 3])
        return [
            *embedding_bad_cases(self.name, lambda indices, weight, **kw: ((indices, weight), kw)),
            BadCase("int-weight", lambda: ((i, torch.zeros(10, 4, dtype=torch.int64)), {}), DTypeError,
                    "weight must be float32, float16, bfloat16, got torch.int64"),
            BadCase("weight-1d", lambda: ((i, torch.zeros(10)), {}), ArgumentError,
                    "weight must be 2-D (num_weights, dim), got shape (10,)"),
        ]

    # --- autograd ----------------------------------------------------------------------------

# --- conformance cases (shared with embedding_backward) ---------------------------------------------

def _forward_case(spec: CaseSpec) -> Callable:
    def build(device: torch.device, dtype: torch.dtype, g: torch.Generator) -> tuple[tuple, dict]:
        return (case_indices(spec, device, g), case_weight(spec, device, dtype, g)), dict(spec[5])
    return build


