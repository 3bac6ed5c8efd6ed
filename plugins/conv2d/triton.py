"""conv2d in Triton: an implicit GEMM with tl.dot over im2col tiles gathered on the fly.

Rows of the GEMM are output pixels (n, oh, ow), columns output channels, and the reduction runs over
(r, s, c) in BLOCK_K-channel steps of one tap at a time, flattened into one loop so that Triton
pipelines its loads. x and the output are read and written through their strides; the wrapper makes x
channels-last first (config channels_last: tiles then load C-contiguous) and the weight R×S×C×K (its
tiles K-contiguous). With TRANSPOSED the same kernel computes the input gradient (conv2d_backward):
rows are input pixels, the source is the output gradient at oh = (ih + ph − r·dh) / sh where that
divides exactly, and the weight is read R×S×K×C.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl
from kernelzoo_plugins.linear.triton import check_fits

from kernelzoo.backends.triton import TritonImplementation
from kernelzoo.registry import Call

from . import batched, conv_shape, output_shape


@triton.jit
def conv_kernel(x_ptr, w_ptr, bias_ptr, out_ptr, NPIX, C, H, W, K, OH, OW, R, S, sh, sw, ph, pw, dh, dw,
                sxn, sxc, sxh, sxw, swr, sws, swc, swk, son, sok, soh, sow,
                TRANSPOSED: tl.constexpr, HAS_BIAS: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr, PRECISION: tl.constexpr):
    # out[n, k, oh, ow] = bias[k] + Σ_{r, s, c} x[n, c, ih, iw] · w[r, s, c, k] over the (n, oh, ow) of
    # NPIX = N·OH·OW rows; ih = oh·sh − ph + r·dh (TRANSPOSED: ih = (oh + ph − r·dh) / sh, exact), iw likewise
    pid = tl.program_id(0)
    tiles_n = tl.cdiv(K, BLOCK_N)
    per_group = GROUP_M * tiles_n
    first_m = (pid // per_group) * GROUP_M
    group_m = min(tl.cdiv(NPIX, BLOCK_M) - first_m, GROUP_M)
    pid_m = first_m + (pid % per_group) % group_m
    pid_n = (pid % per_group) // group_m

    pix = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    pix_ok = pix < NPIX
    n = pix // (OH * OW)
    oh = pix % (OH * OW) // OW
    ow = pix % OW
    ks = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    k_ok = ks < K
    x_img = x_ptr + n.to(tl.int64) * sxn
    c_tiles = tl.cdiv(C, BLOCK_K)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for t in range(0, R * S * c_tiles):
        rs = t // c_tiles
        r = rs // S
        s = rs % S
        cs = (t % c_tiles) * BLOCK_K + tl.arange(0, BLOCK_K)
        if TRANSPOSED:
            hn = oh + ph - r * dh
            wn = ow + pw - s * dw
            ih = hn // sh
            iw = wn // sw
            ok = pix_ok & (hn >= 0) & (wn >= 0) & (ih * sh == hn) & (iw * sw == wn) & (ih < H) & (iw < W)
        else:
            ih = oh * sh - ph + r * dh
            iw = ow * sw - pw + s * dw
            ok = pix_ok & (ih >= 0) & (ih < H) & (iw >= 0) & (iw < W)
        a_ptrs = x_img[:, None] + ih[:, None] * sxh + iw[:, None] * sxw + cs[None, :] * sxc
        a = tl.load(a_ptrs, mask=ok[:, None] & (cs[None, :] < C), other=0.0)
        b_ptrs = w_ptr + r * swr + s * sws + cs[:, None] * swc + ks[None, :] * swk
        b = tl.load(b_ptrs, mask=(cs[:, None] < C) & k_ok[None, :], other=0.0)
        acc = tl.dot(a, b, acc, input_precision=PRECISION)
    if HAS_BIAS:
        acc += tl.load(bias_ptr + ks, mask=k_ok, other=0.0).to(tl.float32)[None, :]
    o_ptrs = out_ptr + (n.to(tl.int64) * son + oh * soh + ow * sow)[:, None] + ks[None, :].to(tl.int64) * sok
    tl.store(o_ptrs, acc.to(out_ptr.dtype.element_ty), mask=pix_ok[:, None] & k_ok[None, :])


def conv(x: torch.Tensor, w: torch.Tensor, bias: torch.Tensor | None, out: torch.Tensor, geometry: tuple,
         transposed: bool, config: dict) -> None:
    """out (N, K, OH, OW) from x (N, C, H, W) and w viewed (R, S, C, K) (any strides), geometry =
    (R, S, stride, padding, dilation); see conv_kernel. out must not be empty."""
    r, s, stride, padding, dilation = geometry
    (n, c, h, wd), (k, oh, ow) = x.shape, out.shape[1:]
    if x.is_cuda:
        check_fits(x.element_size(), config)
    if config["channels_last"]:
        x = x.contiguous(memory_format=torch.channels_last)
    npix = n * oh * ow
    grid = (triton.cdiv(npix, config["BLOCK_M"]) * triton.cdiv(k, config["BLOCK_N"]),)
    conv_kernel[grid](
        x, w, bias.contiguous() if bias is not None else out, out, npix, c, h, wd, k, oh, ow, r, s, *stride,
        *padding, *dilation, *x.stride(), *w.stride(), *out.stride(), TRANSPOSED=transposed,
        HAS_BIAS=bias is not None, BLOCK_M=config["BLOCK_M"], BLOCK_N=config["BLOCK_N"],
        BLOCK_K=config["BLOCK_K"], GROUP_M=config["GROUP_M"],
        PRECISION="ieee" if x.dtype == torch.float32 else "tf32", num_warps=config["num_warps"],
        num_stages=config["num_stages"])


class ConvTritonImplementation(TritonImplementation):
    """The config space of conv_kernel: BLOCK_M pixels × BLOCK_N channels × BLOCK_K reduction channels."""

    config_space = {"BLOCK_M": [64, 128], "BLOCK_N": [64, 128], "BLOCK_K": [32, 64], "GROUP_M": [8],
                    "num_warps": [4, 8], "num_stages": [3, 4], "channels_last": [True, False]}
    default_config = {"BLOCK_M": 128, "BLOCK_N": 128, "BLOCK_K": 32, "GROUP_M": 8, "num_warps": 8,
                      "num_stages": 3, "channels_last": True}


class Conv2dTriton(ConvTritonImplementation):
    op = "conv2d"

    def run(self, call: Call, config: dict) -> torch.Tensor:
        cs, out = conv_shape(call), call.empty(output_shape(call))
        if out.numel() == 0:
            return out
        w = call.inputs["weight"].permute(2, 3, 1, 0).contiguous()  # (R, S, C, K)
        conv(batched(call.inputs["x"]), w, call.inputs.get("bias"), batched(out),
             (cs.r, cs.s, cs.stride, cs.padding, cs.dilation), False, config)
        return out
