"""conv2d's gradients in raw CUDA, implicit GEMMs on the shared GEMM core (tensor cores for fp16/bf16,
SIMT float32) over channels-last, channel-padded copies of grad_out and x (conv.cuh's transpose_pad):

- grad_x: a transposed convolution (the output-gradient pixel oh = (ih + ph − r·dh) / sh, where exact),
  with the weight as C×R×S×Kp; written NCHW;
- grad_weight: rows output channels, columns taps × channels, the reduction over all output pixels split
  across blockIdx.z into float32 partials, which wgrad_reduce adds in split order into K×C×R×S;
- grad_bias: column sums of the channels-last output gradient. Deterministic: no atomics anywhere.
"""

from __future__ import annotations

import torch
from kernelzoo_plugins._gemm.conv import batched, conv_shape
from kernelzoo_plugins._gemm.conv_cuda import ConvCudaImplementation, round_up
from kernelzoo_plugins._gemm.cuda import column_sums

from kernelzoo.registry import Call

from . import gradient_shapes

BLOCKS_PER_SM = 2  # grad_weight splits its reduction until it has this many blocks per SM


class Conv2dBackwardCuda(ConvCudaImplementation):
    op = "conv2d_backward"

    def run(self, call: Call, config: dict) -> tuple[torch.Tensor, ...]:
        cs = conv_shape(call)
        outs = tuple(call.empty(shape) for shape in gradient_shapes(call))
        if cs.n == 0:  # no image: the sums over images are empty
            return tuple(out.zero_() for out in outs)
        g, x, w = batched(call.inputs["grad_out"]), batched(call.inputs["x"]), call.inputs["weight"]
        vec = self.vec(call.dtype)
        kp, cp = round_up(cs.k, vec), round_up(cs.c, vec)
        geometry = (*cs.stride, *cs.padding, *cs.dilation)
        dy_t = self.channels_last(call, config, g, kp)  # (N, OH, OW, Kp)

        w_t = self.transpose_pad(call, config, w.reshape(1, cs.k, cs.c * cs.r * cs.s), kp)  # (C·R·S, Kp)
        q = cs.n * cs.h * cs.w
        self.launch_gemm(call, "conv2d_grad_x", config, True, True,
                         (w_t, dy_t, batched(outs[0]), cs.c, q, kp, cs.oh, cs.ow, cs.h, cs.w, cs.r, cs.s, *geometry),
                         self.tiles(cs.c, q, config))

        x_t = self.channels_last(call, config, x, cp)  # (N, H, W, Cp)
        ncols, q = cs.r * cs.s * cp, cs.n * cs.oh * cs.ow
        k_tiles, tiles = -(-q // config["BK"]), self.tiles(cs.k, ncols, config)
        sms = torch.cuda.get_device_properties(call.device).multi_processor_count
        per_split = -(-k_tiles // max(1, min(k_tiles, -(-BLOCKS_PER_SM * sms // tiles))))
        splits = -(-k_tiles // per_split)  # every split has at least one k-tile
        ws = torch.empty((splits, cs.k, ncols), dtype=torch.float32, device=x.device)
        self.launch_gemm(call, "conv2d_grad_w", config, False, False,
                         (dy_t, x_t, ws, cs.k, ncols, kp, cp, cs.n, cs.h, cs.w, cs.oh, cs.ow, cs.s, *geometry,
                          per_split), tiles, batch=splits)
        elements = cs.k * cs.c * cs.r * cs.s
        self.kernel("wgrad_reduce", call.dtype, config)(ws, outs[1], splits, cs.k, cs.c, cs.r * cs.s, cp,
                                                        grid=-(-elements // 256), block=256)
        if call.params["bias"]:
            column_sums(self, call, config, dy_t, kp, q, cs.k, outs[2])
        return outs
