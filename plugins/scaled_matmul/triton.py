"""scaled_matmul in Triton: the GEMM family's kernels (plugins/_gemm/triton.py) on the FP8 operands, into a float32
accumulator, the scales and the bias applied once in the epilogue.

On Hopper the persistent TMA kernel reads both operands K-major, as the tensor cores' 8-bit float instructions
want: b column-major (torch._scaled_mm's layout) as it lies, another b transposed first. The products of two 8-bit
floats are exact in float32, but Hopper's tensor cores add them in an accumulator narrower than float32: every
PROMOTE_K of K the kernel adds that partial sum into its float32 one (Triton's max_num_imprecise_acc), more often
being more precise and slower; the tuner keeps the fastest that still verifies.
"""

from __future__ import annotations

import torch
from kernelzoo_plugins._gemm.triton import GemmTritonImplementation, Scales, gemm

from kernelzoo.registry import FP8, Call

from . import capability, out_dtype, rowwise


class ScaledMatmulTriton(GemmTritonImplementation):
    op = "scaled_matmul"
    dtypes = {"cuda": FP8, "cpu": FP8}  # a's dtype; the output's is out_dtype
    # the GEMM family's space with 128-deep steps (an FP8 instruction is 32 deep) and PROMOTE_K in K elements
    config_space = {**GemmTritonImplementation.config_space, "BLOCK_K": [64, 128], "PROMOTE_K": [32, 64, 128],
                    "TF32X3": [0]}
    # Hopper's FP8 tile: 128×128 outputs over 8 warps, 128-deep steps of 32 KiB, three in flight; the sums promoted
    # once a step, as often as cuBLAS's and with its error, and 1.5× faster than promoting every instruction's
    # (docs/design/gemm.md). 128×256, a seed, does not fit every call: with float32 outputs, and with row-wise
    # scales on some shapes, it needs 245808 bytes of shared memory, past a block's 227 KiB.
    default_config = {"TMA": 1, "BLOCK_M": 128, "BLOCK_N": 128, "BLOCK_K": 128, "GROUP_M": 8, "num_warps": 8,
                      "num_stages": 3, "SUBTILE": 1, "WS": 0, "PROMOTE_K": 128, "TF32X3": 0}
    tuning_seeds = ({"BLOCK_N": 256}, {"WS": 1}, {"num_stages": 4}, {"BLOCK_M": 256, "BLOCK_N": 128},
                    {"PROMOTE_K": 32})

    def supports(self, call: Call) -> str | None:
        why = super().supports(call)
        if why is None and call.device.type == "cuda" and capability(call.device.index) < (8, 9):
            return "Triton's 8-bit float dot needs a GPU of compute capability 8.9 or newer"
        return why

    def run(self, call: Call, config: dict) -> torch.Tensor:
        a, b = call.inputs["a"], call.inputs["b"]
        scale_a, scale_b = call.inputs["scale_a"], call.inputs["scale_b"]
        out = call.empty((a.shape[0], b.shape[1]), out_dtype(call))
        if out.numel():
            scales = Scales(scale_a.reshape(-1).contiguous(), scale_b.reshape(-1).contiguous(), rowwise(call))
            gemm(a, b, out, call.inputs.get("bias"), config, scales)
        return out
