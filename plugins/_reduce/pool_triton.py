"""What max_pool2d's Triton kernel and its backward's share: a program's block of a contiguous NCHW tensor."""

from __future__ import annotations

import triton
import triton.language as tl


@triton.jit
def nchw_block(TOTAL, C, H, W, BLOCK: tl.constexpr):
    """This program's BLOCK flat indices into a contiguous (N, C, H, W) tensor of TOTAL elements, whether each
    is inside it, and their (n, c, h, w) coordinates."""
    i = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    w = i % W
    h = i // W % H
    c = i // (W * H) % C
    n = i // (W * H * C)
    return i, i < TOTAL, n, c, h, w
