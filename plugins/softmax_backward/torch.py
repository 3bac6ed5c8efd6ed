"""torch._softmax_backward_data (what torch.softmax's autograd runs): the baseline."""

from __future__ import annotations

import torch

from kernelzoo.registry import FLOATS, Call, Implementation


class SoftmaxBackwardTorch(Implementation):
    op = "softmax_backward"
    plugin = "torch"
    # float32 only on the GPU: torch's CUDA kernel sums grad·y in the input's half precision and misses the
    # float64-reference tolerance in many of the fp16/bf16 conformance cases (torch 2.11)
    dtypes = {"cpu": FLOATS, "cuda": (torch.float32,)}

    def run(self, call: Call, config: dict) -> torch.Tensor:
        y = call.inputs["y"]
        return torch._softmax_backward_data(call.inputs["grad"], y, call.params["dim"], y.dtype)
