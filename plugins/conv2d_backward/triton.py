"""conv2d's gradients in Triton, all as tl.dot implicit GEMMs:

- grad_x: conv2d's kernel with TRANSPOSED (rows are input pixels, the source the output gradient at
  oh = (ih + ph − r·dh) / sh where exact, the weight read R×S×K×C);
- grad_weight: one K × (R·S·C) GEMM over the output pixels (wgrad_kernel: the columns are (tap, channel)
  pairs gathered from x, so that few channels do not pad a tile per tap — the 3-channel 7×7 stem had 49 tiles
  of 3 useful columns in 64), float32 partials per pixel split, then the splits added in order
  (linear_backward's channel_sums) and the (K, R, S, C) sums laid out as (K, C, R, S);
- grad_bias: channel_sums of the output gradient. Deterministic: no atomics anywhere.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl
from kernelzoo_plugins._gemm.conv import ConvShape, batched, conv_shape
from kernelzoo_plugins._gemm.conv_triton import ConvTritonImplementation, channels_last, conv, weight_rsck
from kernelzoo_plugins._gemm.limits import check_fits
from kernelzoo_plugins._gemm.triton import channel_sums

from kernelzoo.backends.triton import cdiv, launcher
from kernelzoo.registry import Call

from . import gradient_shapes

TARGET_PROGRAMS = 528  # 4 programs per SM of an H100: grad_weight splits its pixels until it has these


@triton.jit
def wgrad_kernel(g_ptr, x_ptr, ws_ptr, NPIX, C, H, W, K, OH, OW, S, COLS, sh, sw, ph, pw, dh, dw,
                 sgn, sgk, sgh, sgw, sxn, sxc, sxh, sxw, per_split,
                 BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, PRECISION: tl.constexpr):
    # ws[split, k, j] = Σ over the split's output pixels (n, oh, ow) of g[n, k, oh, ow] · x[n, c, ih, iw] for the
    # columns j = (r·S + s)·C + c (COLS = R·S·C of them), ih = oh·sh − ph + r·dh, iw = ow·sw − pw + s·dw (zero
    # outside x): one GEMM over every tap, so a tile of BLOCK_N columns spans taps when C is small. (Gathering
    # per pixel where a tile's columns share one tap measured slower: docs/design/conv.md.)
    tiles_n = tl.cdiv(COLS, BLOCK_N)
    pid_m = tl.program_id(0) // tiles_n
    pid_n = tl.program_id(0) % tiles_n
    split = tl.program_id(1)
    ks = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    js = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    c = js % C
    rs = js // C
    dih = (rs // S) * dh  # (BLOCK_N,) the column's tap offsets
    diw = (rs % S) * dw
    col_ok = js < COLS
    p_begin = split * per_split
    p_end = tl.minimum(NPIX, p_begin + per_split)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for p0 in range(p_begin, p_end, BLOCK_K):
        pix = p0 + tl.arange(0, BLOCK_K)
        ok = pix < p_end
        n = (pix // (OH * OW)).to(tl.int64)
        oh = pix % (OH * OW) // OW
        ow = pix % OW
        a = tl.load(g_ptr + (n * sgn + oh * sgh + ow * sgw)[None, :] + ks[:, None] * sgk,
                    mask=(ks[:, None] < K) & ok[None, :], other=0.0)
        ih = (oh * sh - ph)[:, None] + dih[None, :]  # (BLOCK_K, BLOCK_N)
        iw = (ow * sw - pw)[:, None] + diw[None, :]
        x_ok = ok[:, None] & col_ok[None, :] & (ih >= 0) & (ih < H) & (iw >= 0) & (iw < W)
        b = tl.load(x_ptr + (n * sxn)[:, None] + ih * sxh + iw * sxw + c[None, :] * sxc, mask=x_ok, other=0.0)
        acc = tl.dot(a, b, acc, input_precision=PRECISION)
    out = ws_ptr + (split * K + ks[:, None]).to(tl.int64) * COLS + js[None, :]
    tl.store(out, acc, mask=(ks[:, None] < K) & col_ok[None, :])


class Conv2dBackwardTriton(ConvTritonImplementation):
    op = "conv2d_backward"

    def run(self, call: Call, config: dict) -> tuple[torch.Tensor, ...]:
        cs = conv_shape(call)
        outs = tuple(call.empty(shape) for shape in gradient_shapes(call))
        g, x, w = batched(call.inputs["grad_out"]), batched(call.inputs["x"]), call.inputs["weight"]
        if outs[0].numel():
            conv(g, weight_rsck(w, True), None, batched(outs[0]), (cs.r, cs.s, cs.stride, cs.padding, cs.dilation),
                 True, config)
        self.grad_weight(g, x, outs[1], cs, config)
        if call.params["bias"]:
            channel_sums(g.reshape(cs.n, cs.k, cs.oh * cs.ow), outs[2])
        return outs

    @staticmethod
    def grad_weight(g: torch.Tensor, x: torch.Tensor, gw: torch.Tensor, cs: ConvShape, config: dict) -> None:
        """gw (K, C, R, S) from g (N, K, OH, OW) and x (N, C, H, W): wgrad_kernel, then its splits summed."""
        n, c, h, wd, k, r, s, oh, ow = cs.n, cs.c, cs.h, cs.w, cs.k, cs.r, cs.s, cs.oh, cs.ow
        (sh, sw), (ph, pw), (dh, dw) = cs.stride, cs.padding, cs.dilation
        if x.is_cuda:
            check_fits(x.element_size(), config)
        if config["channels_last"]:
            x = channels_last(x)
        bm, bn, bk = config["BLOCK_M"], config["BLOCK_N"], config["BLOCK_K"]
        cols = r * s * c
        npix, tiles = n * oh * ow, cdiv(k, bm) * cdiv(cols, bn)
        splits = max(1, min(cdiv(TARGET_PROGRAMS, tiles), cdiv(npix, 4 * bk)))
        per_split = cdiv(max(npix, 1), splits)
        ws = torch.empty((splits, k * cols), dtype=torch.float32, device=x.device)
        launcher(wgrad_kernel)[(tiles, splits)](
            g, x, ws, npix, c, h, wd, k, oh, ow, s, cols, sh, sw, ph, pw, dh, dw, *g.stride(), *x.stride(),
            per_split, BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, PRECISION="ieee" if x.dtype == torch.float32 else "tf32",
            num_warps=config["num_warps"], num_stages=config["num_stages"])
        krsc = torch.empty((k, r, s, c), dtype=gw.dtype, device=gw.device)
        channel_sums(ws.t().unsqueeze(0), krsc.view(-1))  # the splits of each element, in order
        gw.copy_(krsc.permute(0, 3, 1, 2))
