"""The base of conv2d's and conv2d_backward's cuda plugins (:class:`ConvCudaImplementation`): the channels-last,
channel-padded copies their implicit GEMMs on conv.cuh read."""

from __future__ import annotations

import torch
from kernelzoo_plugins._gemm.cuda import MAX_GRID_Z, GemmCudaImplementation, aligned

from kernelzoo.errors import UnsupportedError
from kernelzoo.registry import Call


def round_up(n: int, to: int) -> int:
    return -(-n // to) * to


class ConvCudaImplementation(GemmCudaImplementation):
    """A cuda plugin whose source includes conv.cuh: channels-last, channel-padded copies by transpose_pad."""

    # BM = 64 wastes no rows on ResNet's channel counts (64, 128, 256); BN = 128 pixels keeps the grid of
    # the 3×3 convolutions at ~3 waves of 132×3 blocks (100352 pixels at 56×56: 784 blocks). 4 warps of
    # 32×64, 60 KiB of shared memory at fp16: three blocks an SM.
    default_config = {"BM": 64, "BN": 128, "BK": 32, "WM": 32, "WN": 64, "STAGES": 4}

    def transpose_pad(self, call: Call, config: dict, t: torch.Tensor, rows_p: int) -> torch.Tensor:
        """(B, rows, cols) -> a new (B, cols, rows_p) tensor: each matrix transposed, rows past t's zeros."""
        t = t.contiguous()
        batch, rows, cols = t.shape
        if batch > MAX_GRID_Z:
            raise UnsupportedError(f"{self.key}: a batch of {batch} exceeds the grid's {MAX_GRID_Z} on axis z")
        out = torch.empty((batch, cols, rows_p), dtype=t.dtype, device=t.device)
        tile = 64 if t.element_size() == 2 else 32  # TRANSPOSE_TILE in conv.cuh
        self.kernel("transpose_pad", call.dtype, config)(t, out, rows, cols, rows_p, block=(32, 8),
                                                         grid=(-(-cols // tile), -(-rows_p // tile), batch))
        return out

    def channels_last(self, call: Call, config: dict, x: torch.Tensor, cp: int) -> torch.Tensor:
        """(N, C, H, W) -> (N, H, W, Cp) contiguous, channels past C zero; x's own memory where it is that."""
        n, c, h, w = x.shape
        nhwc = x.permute(0, 2, 3, 1)
        if c == cp and nhwc.is_contiguous() and aligned(nhwc):
            return nhwc
        return self.transpose_pad(call, config, x.reshape(n, c, h * w), cp).view(n, h, w, cp)
