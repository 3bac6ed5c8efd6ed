"""conv2d's Triton kernels beyond the conformance cases: both reduction orders of conv_kernel (one tap's
channels per step, and the folded (s, c) pairs of few-channel inputs), forward and input gradient;
the weight gradient's tiles of (tap, channel) columns, spanning taps or not (3, 20, 32 channels in tiles of
16); and the layout copies (channels_last, weight_rsck) they read. Tiny sizes: the interpreter runs these
on the CPU."""

from __future__ import annotations

import pytest
import torch
from kernelzoo_plugins._gemm import conv_triton

from kernelzoo.registry import registry

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
# BLOCK_K 16: 3 channels fold (2·3 <= 16), 20 and 32 do not; BLOCK_N 16 divides 32 (a tap's columns fill tiles)
CONFIG = {"BLOCK_M": 32, "BLOCK_N": 16, "BLOCK_K": 16, "GROUP_M": 8, "num_warps": 4, "num_stages": 2,
          "channels_last": True}
GEOMETRIES = {"stride2-pad1": {"stride": 2, "padding": 1}, "dilation2-pad1x0": {"padding": (1, 0), "dilation": 2}}


@pytest.mark.parametrize("channels", [3, 20, 32])
@pytest.mark.parametrize("geometry", GEOMETRIES)
@pytest.mark.parametrize("op", ["conv2d", "conv2d_backward"])
def test_reduction_orders_match_reference(op: str, geometry: str, channels: int) -> None:
    assert conv_triton.fold_taps(channels, CONFIG) == (channels == 3)
    spec, plugin = registry.op(op), registry.impl(op, "triton")
    if not plugin.available().ok:
        pytest.skip(plugin.available().reason)
    call = spec.example((2, channels, 7, 9, 5, 3, 2), torch.float32, DEVICE, torch.Generator().manual_seed(channels),
                        **GEOMETRIES[geometry])
    mismatch = spec.verify(call, plugin.run(call, CONFIG), spec.reference(call))
    assert mismatch is None, mismatch


@pytest.mark.parametrize("layout", ["contiguous", "sliced", "channels-last"])
def test_channels_last_copy(layout: str) -> None:
    x = torch.randn(2, 5, 6, 14, device=DEVICE)
    if layout == "sliced":
        x = x[:, 1:, :, ::2]
    elif layout == "channels-last":
        x = x.contiguous(memory_format=torch.channels_last)
    y = conv_triton.channels_last(x)
    assert y.is_contiguous(memory_format=torch.channels_last)
    assert torch.equal(y, x)
    assert (y.data_ptr() == x.data_ptr()) == (layout == "channels-last")


def test_weight_views() -> None:
    w = torch.randn(6, 5, 3, 2, device=DEVICE)
    forward, transposed = conv_triton.weight_rsck(w, False), conv_triton.weight_rsck(w, True)
    assert torch.equal(forward, w.permute(2, 3, 1, 0)) and forward.stride(-1) == 1
    assert torch.equal(transposed, w.permute(2, 3, 0, 1)) and transposed.stride(-1) == 1
