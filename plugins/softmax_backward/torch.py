"""torch._softmax_backward_data (what torch.softmax's autograd runs): the baseline."""

from __future__ import annotations

import torch

from kernelzoo.registry import FLOATS, Call, Implementation


class SoftmaxBackwardTorch(Implementation):
    op = "softmax_backward"
    plugin = "torch"
    dtypes = {"cpu": FLOATS, "cuda": FLOATS}

    def run(self, call: Call, config: dict) -> torch.Tensor:
        y = call.inputs["y"]
        return torch._softmax_backward_data(call.inputs["grad"], y, call.params["dim"], y.dtype)
