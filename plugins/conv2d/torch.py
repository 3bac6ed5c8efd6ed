"""torch.nn.functional.conv2d (cuDNN on the GPU, oneDNN on the CPU): the baseline.

float32 on the GPU runs with cuDNN's TF32 off (torch allows it for convolutions by default), so that
it computes float32 products as the op asks and the other plugins do.
"""

from __future__ import annotations

import torch
from kernelzoo_plugins._gemm.conv import ieee_float32

from kernelzoo.registry import Call, Implementation


class Conv2dTorch(Implementation):
    op = "conv2d"
    plugin = "torch"
    # not bfloat16 on the CPU: oneDNN's bf16 convolution turns ±inf inputs into NaN where the sum is ±inf
    # (33 of 256 outputs in the nan-inf case)
    # float32 only on the GPU: cuDNN's fp16/bf16 convolutions miss the op's float64-reference tolerance in every
    # fp16/bf16 conformance case, which kernelzoo's own conv kernels meet (docs/design/conv.md)
    dtypes = {"cpu": (torch.float32, torch.float16), "cuda": (torch.float32,)}

    def run(self, call: Call, config: dict) -> torch.Tensor:
        i = call.inputs
        with ieee_float32(call):
            return torch.nn.functional.conv2d(i["x"], i["weight"], i.get("bias"), **call.params)
