"""conv2d's implicit-GEMM Triton kernel (conv_kernel), the channels-last and weight-layout copies it reads, and
:class:`ConvTritonImplementation`, the base of conv2d's and conv2d_backward's Triton plugins. With TRANSPOSED the
same kernel computes conv2d_backward's input gradient (see plugins/conv2d/triton.py for the kernel's design)."""

from __future__ import annotations

import torch
import triton
import triton.language as tl
from kernelzoo_plugins._gemm.limits import check_fits

from kernelzoo.backends.triton import TritonImplementation, cdiv, launcher

TRANSPOSE_TILE = 64
MAX_GRID_YZ = 65535


@triton.jit
def conv_kernel(x_ptr, w_ptr, bias_ptr, out_ptr, NPIX, C, H, W, K, OH, OW, R, S, sh, sw, ph, pw, dh, dw,
                sxn, sxc, sxh, sxw, swr, sws, swc, swk, son, sok, soh, sow,
                TRANSPOSED: tl.constexpr, FOLD_S: tl.constexpr, HAS_BIAS: tl.constexpr, BLOCK_M: tl.constexpr,
                BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr, PRECISION: tl.constexpr):
    # out[n, k, oh, ow] = bias[k] + Σ_{r, s, c} x[n, c, ih, iw] · w[r, s, c, k] over the (n, oh, ow) of
    # NPIX = N·OH·OW rows; ih = oh·sh − ph + r·dh (TRANSPOSED: ih = (oh + ph − r·dh) / sh, exact), iw likewise.
    # A step reduces BLOCK_K channels of one tap (r, s), or with FOLD_S (few channels) BLOCK_K of the S·C
    # pairs (s, c) of one kernel row r.
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
    if FOLD_S:
        taps = 1
        steps = tl.cdiv(S * C, BLOCK_K)
    else:
        taps = S
        steps = tl.cdiv(C, BLOCK_K)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for t in range(0, R * taps * steps):
        rs = t // steps
        r = rs // taps
        red = (t % steps) * BLOCK_K + tl.arange(0, BLOCK_K)
        if FOLD_S:
            s_a = (red // C)[None, :]  # (1, BLOCK_K) for the x tile
            s_b = (red // C)[:, None]  # (BLOCK_K, 1) for the weight tile
            cs = red % C
            red_ok = red < S * C
        else:
            s_a = rs % taps
            s_b = s_a
            cs = red
            red_ok = red < C
        if TRANSPOSED:
            hn = oh + ph - r * dh
            ih = hn // sh
            row_ok = pix_ok & (hn >= 0) & (ih * sh == hn) & (ih < H)
            wn = ow[:, None] + pw - s_a * dw
            iw = wn // sw
            ok = row_ok[:, None] & (wn >= 0) & (iw * sw == wn) & (iw < W)
        else:
            ih = oh * sh - ph + r * dh
            row_ok = pix_ok & (ih >= 0) & (ih < H)
            iw = ow[:, None] * sw - pw + s_a * dw
            ok = row_ok[:, None] & (iw >= 0) & (iw < W)
        a_ptrs = x_img[:, None] + (ih * sxh)[:, None] + iw * sxw + cs[None, :] * sxc
        a = tl.load(a_ptrs, mask=ok & red_ok[None, :], other=0.0)
        b_ptrs = w_ptr + r * swr + s_b * sws + cs[:, None] * swc + ks[None, :] * swk
        b = tl.load(b_ptrs, mask=red_ok[:, None] & k_ok[None, :], other=0.0)
        acc = tl.dot(a, b, acc, input_precision=PRECISION)
    if HAS_BIAS:
        acc += tl.load(bias_ptr + ks, mask=k_ok, other=0.0).to(tl.float32)[None, :]
    o_ptrs = out_ptr + (n.to(tl.int64) * son + oh * soh + ow * sow)[:, None] + ks[None, :].to(tl.int64) * sok
    tl.store(o_ptrs, acc.to(out_ptr.dtype.element_ty), mask=pix_ok[:, None] & k_ok[None, :])


@triton.jit
def transpose_kernel(src_ptr, dst_ptr, P, Q, s_b, s_p, s_q, BLOCK_P: tl.constexpr, BLOCK_Q: tl.constexpr):
    # dst[b, q, p] = src[b, p, q], dst contiguous (B, Q, P): a tile is read along q and written along p
    b = tl.program_id(2).to(tl.int64)
    p = tl.program_id(1) * BLOCK_P + tl.arange(0, BLOCK_P)
    q = tl.program_id(0) * BLOCK_Q + tl.arange(0, BLOCK_Q)
    ok = (p[:, None] < P) & (q[None, :] < Q)
    tile = tl.load(src_ptr + b * s_b + p[:, None] * s_p + q[None, :] * s_q, mask=ok)
    tl.store(dst_ptr + b * P * Q + q[None, :] * P + p[:, None], tile, mask=ok)


def transposed(t: torch.Tensor) -> torch.Tensor:
    """A new contiguous (B, Q, P) copy of the (B, P, Q) tensor t (any strides) with [b, q, p] = t[b, p, q]:
    one pass of transpose_kernel (torch's permuted copy where the grid or int32 offsets would not hold)."""
    batch, p, q = t.shape
    out = torch.empty((batch, q, p), dtype=t.dtype, device=t.device)
    tiles_p = cdiv(p, TRANSPOSE_TILE)
    if out.numel() == 0 or batch > MAX_GRID_YZ or tiles_p > MAX_GRID_YZ or p * q >= 2**31:
        return out.copy_(t.transpose(1, 2))
    launcher(transpose_kernel)[(cdiv(q, TRANSPOSE_TILE), tiles_p, batch)](
        t, out, p, q, *t.stride(), BLOCK_P=TRANSPOSE_TILE, BLOCK_Q=TRANSPOSE_TILE, num_warps=4)
    return out


def channels_last(x: torch.Tensor) -> torch.Tensor:
    """x (N, C, H, W) with channels-last memory (strides (H·W·C, 1, W·C, C)): x itself when it already is,
    else a copy by transposed (torch's copy when H and W cannot be read as one axis)."""
    n, c, h, w = x.shape
    if x.is_contiguous(memory_format=torch.channels_last):
        return x
    if x.stride(2) != w * x.stride(3):
        return x.contiguous(memory_format=torch.channels_last)
    return transposed(x.as_strided((n, c, h * w), (x.stride(0), x.stride(1), x.stride(3)))).view(
        n, h, w, c).permute(0, 3, 1, 2)


def weight_rsck(w: torch.Tensor, transposed_conv: bool) -> torch.Tensor:
    """The weight (K, C, R, S) as the (R, S, C, K) view conv reads, its last axis contiguous: one transposed
    copy. transposed_conv: the (R, S, K, C) view for the input gradient, C contiguous."""
    k, c, r, s = w.shape
    w = w.contiguous()
    if transposed_conv:  # per output channel, (C, R·S) -> (R·S, C)
        return transposed(w.view(k, c, r * s)).view(k, r, s, c).permute(1, 2, 0, 3)
    return transposed(w.view(1, k, c * r * s)).view(c, r, s, k).permute(1, 2, 0, 3)


def fold_taps(c: int, config: dict) -> bool:
    """Reduce over (s, c) pairs instead of one tap's channels: channels fill at most half a BLOCK_K step."""
    return 2 * c <= config["BLOCK_K"]


def conv(x: torch.Tensor, w: torch.Tensor, bias: torch.Tensor | None, out: torch.Tensor, geometry: tuple,
         transposed_conv: bool, config: dict) -> None:
    """out (N, K, OH, OW) from x (N, C, H, W) and w viewed (R, S, C, K) (any strides), geometry =
    (R, S, stride, padding, dilation); see conv_kernel. out must not be empty."""
    r, s, stride, padding, dilation = geometry
    (n, c, h, wd), (k, oh, ow) = x.shape, out.shape[1:]
    if x.is_cuda:
        check_fits(x.element_size(), config)
    if config["channels_last"]:
        x = channels_last(x)
    npix = n * oh * ow
    grid = (cdiv(npix, config["BLOCK_M"]) * cdiv(k, config["BLOCK_N"]),)
    launcher(conv_kernel)[grid](
        x, w, bias.contiguous() if bias is not None else out, out, npix, c, h, wd, k, oh, ow, r, s, *stride,
        *padding, *dilation, *x.stride(), *w.stride(), *out.stride(), TRANSPOSED=transposed_conv,
        FOLD_S=fold_taps(c, config), HAS_BIAS=bias is not None, BLOCK_M=config["BLOCK_M"],
        BLOCK_N=config["BLOCK_N"], BLOCK_K=config["BLOCK_K"], GROUP_M=config["GROUP_M"],
        PRECISION="ieee" if x.dtype == torch.float32 else "tf32", num_warps=config["num_warps"],
        num_stages=config["num_stages"])


class ConvTritonImplementation(TritonImplementation):
    """The config space of conv_kernel: BLOCK_M pixels × BLOCK_N channels × BLOCK_K reduction channels."""

    config_space = {"BLOCK_M": [64, 128], "BLOCK_N": [64, 128], "BLOCK_K": [32, 64], "GROUP_M": [8],
                    "num_warps": [4, 8], "num_stages": [3, 4], "channels_last": [True, False]}
    default_config = {"BLOCK_M": 128, "BLOCK_N": 128, "BLOCK_K": 32, "GROUP_M": 8, "num_warps": 8,
                      "num_stages": 3, "channels_last": True}
