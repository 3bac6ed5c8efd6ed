"""aten's value_selecting_reduction_backward (what torch.max(x, dim)'s autograd runs): the baseline. For
dim=None it runs on the flattened x (torch.max(x)'s own backward spreads the gradient over every tie)."""

from __future__ import annotations

import math

import torch

from kernelzoo.backends.tensor_ops import TorchImplementation
from kernelzoo.registry import Call


class MaxBackwardTorch(TorchImplementation):
    op = "max_backward"

    def run(self, call: Call, config: dict) -> torch.Tensor:
        g, indices = call.inputs["grad"], call.inputs["indices"]
        dim, shape, keepdim = call.params["dim"], call.params["input_shape"], call.params["keepdim"]
        if dim is None or not shape:  # one element, at a flat index
            flat = torch.ops.aten.value_selecting_reduction_backward(g.reshape(1), 0, indices.reshape(1),
                                                                     [math.prod(shape)], True)
            return flat.view(shape)
        return torch.ops.aten.value_selecting_reduction_backward(g, dim, indices, list(shape), keepdim)
