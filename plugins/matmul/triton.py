"""matmul in Triton: the GEMM family's kernels (plugins/_gemm/triton.py) over 2-D or batched operands.

On Hopper the tuned config usually takes the persistent TMA kernel; operands whose rows are not 16-byte aligned
are copied aligned first. Any other layout (transposed, sliced, broadcast batch) is read as it lies. fp16/bf16
go to the tensor cores; float32 runs in IEEE float32, in TF32 where torch allows it, or as three TF32 products
(the config's TF32X3; plugins/_gemm/triton.py).
"""

from __future__ import annotations

import torch
from kernelzoo_plugins._gemm.triton import GemmTritonImplementation, gemm

from kernelzoo.registry import Call

from . import batched, output_shape


class MatmulTriton(GemmTritonImplementation):
    op = "matmul"

    def run(self, call: Call, config: dict) -> torch.Tensor:
        a3, b3, _ = batched(call)
        out = call.empty(output_shape(call))
        if out.numel():
            gemm(a3, b3, out, None, config)
        return out
