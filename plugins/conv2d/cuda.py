"""conv2d in raw CUDA: an implicit GEMM on the shared GEMM core (tensor cores for fp16/bf16, mma.sync
m16n8k16 fed by ldmatrix; SIMT float32), im2col gathered on the fly, output written NCHW with the bias.

The GEMM reads a channels-last copy of x whose channels are zero-padded to a multiple of 16 bytes
(transpose_pad, one pass over x; none when x already is channels-last with such a channel count), and
the weight as K×R×S×Cp, so that every operand load is a 16-byte cp.async. A 1×1 convolution with
stride 1 and no padding skips the copy: a plain GEMM per image on NCHW. ConvCudaImplementation is the
base of conv2d's and conv2d_backward's cuda plugins: those layout copies.
"""

from __future__ import annotations

import torch
from kernelzoo_plugins._gemm.conv_cuda import ConvCudaImplementation, round_up
from kernelzoo_plugins._gemm.cuda import aligned

from kernelzoo.registry import Call

from . import batched, conv_shape, output_shape


class Conv2dCuda(ConvCudaImplementation):
    op = "conv2d"

    def run(self, call: Call, config: dict) -> torch.Tensor:
        cs, out = conv_shape(call), call.empty(output_shape(call))
        if out.numel() == 0:
            return out
        x, w, bias = batched(call.inputs["x"]), call.inputs["weight"], call.inputs.get("bias")
        bias = bias.contiguous() if bias is not None else None
        vec = self.vec(call.dtype)
        if (cs.r, cs.s, cs.stride, cs.padding) == (1, 1, (1, 1), (0, 0)):
            x, w2, hw = x.contiguous(), w.reshape(cs.k, cs.c).contiguous(), cs.h * cs.w
            kind = "aligned" if cs.c % vec == 0 and hw % vec == 0 and aligned(x, w2) else "guarded"
            self.launch_gemm(call, f"conv2d_1x1_{kind}", config, True, False, (w2, x, out, bias, cs.k, hw, cs.c),
                             self.tiles(cs.k, hw, config), batch=cs.n)
            return out
        cp = round_up(cs.c, vec)
        x_t = self.channels_last(call, config, x, cp)  # (N, H, W, Cp)
        w_t = self.transpose_pad(call, config, w.reshape(cs.k, cs.c, cs.r * cs.s), cp)  # (K, R·S, Cp)
        q = cs.n * cs.oh * cs.ow
        self.launch_gemm(call, "conv2d_forward", config, True, True,
                         (w_t, x_t, out, bias, cs.k, q, cp, cs.h, cs.w, cs.oh, cs.ow, cs.r, cs.s, *cs.stride,
                          *cs.padding, *cs.dilation), self.tiles(cs.k, q, config))
        return out
