"""conv2d in Triton: an implicit GEMM with tl.dot over im2col tiles gathered on the fly.

Rows of the GEMM are output pixels (n, oh, ow), columns output channels, and the reduction runs over
(r, s, c) in BLOCK_K-channel steps of one tap at a time, flattened into one loop so that Triton
pipelines its loads. With few channels (FOLD_S: C at most half of BLOCK_K, the 3-channel stem) a step
takes BLOCK_K of the S·C pairs (s, c) of one kernel row instead, so that 7×7 taps of 3 channels reduce
in 7 steps of 32, not 49 steps of 16 mostly zero. x and the output are read and written through their
strides; the wrapper makes x channels-last first (config channels_last: tiles then load C-contiguous)
with one pass of transpose_kernel (torch's permuted copies took about as long as the convolution itself
at ResNet's shapes: see docs/design/conv.md), and the weight R×S×C×K (its tiles K-contiguous). With
TRANSPOSED the same kernel computes the input gradient (conv2d_backward): rows are input pixels, the
source is the output gradient at oh = (ih + ph − r·dh) / sh where that divides exactly, and the weight
is read R×S×K×C.
"""

from __future__ import annotations

import torch
from kernelzoo_plugins._gemm.conv_triton import ConvTritonImplementation, conv, weight_rsck

from kernelzoo.registry import Call

from . import batched, conv_shape, output_shape


class Conv2dTriton(ConvTritonImplementation):
    op = "conv2d"
    # the best geometric mean of the kernel's time over the six ResNet shapes at fp16 (docs/design/conv.md):
    # 36 KiB of shared memory, 64 accumulators a thread
    default_config = {"BLOCK_M": 128, "BLOCK_N": 64, "BLOCK_K": 32, "GROUP_M": 8, "num_warps": 4, "num_stages": 3,
                      "channels_last": True}

    def run(self, call: Call, config: dict) -> torch.Tensor:
        cs, out = conv_shape(call), call.empty(output_shape(call))
        if out.numel() == 0:
            return out
        w = weight_rsck(call.inputs["weight"], False)
        conv(batched(call.inputs["x"]), w, call.inputs.get("bias"), batched(out),
             (cs.r, cs.s, cs.stride, cs.padding, cs.dilation), False, config)
        return out
