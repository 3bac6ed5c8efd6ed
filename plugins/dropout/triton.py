"""dropout in Triton: one program per BLOCK elements, the index hash in uint32 (which wraps, as in C)."""

from __future__ import annotations

from typing import Any

import triton
import triton.language as tl

from kernelzoo.backends.triton_unary import ElementwiseTriton
from kernelzoo.registry import Call

from . import scale, seed_halves, threshold


@triton.jit
def _mix(v):  # lowbias32, on uint32
    v = v ^ (v >> 16)
    v = v * 0x7FEB352D
    v = v ^ (v >> 15)
    v = v * 0x846CA68B
    return v ^ (v >> 16)


# seed halves and threshold change from call to call: specialising on them (== 1, multiple of 16) would
# compile more kernels for nothing. They come as int32 bit patterns, so that their type never changes.
@triton.jit(do_not_specialize=["seed_lo", "seed_hi", "threshold"])
def _dropout_kernel(x_ptr, y_ptr, n, seed_lo, seed_hi, threshold, scale, BLOCK: tl.constexpr):
    k1 = _mix(seed_hi.to(tl.uint32, bitcast=True) ^ _mix(seed_lo.to(tl.uint32, bitcast=True) + 0x9E3779B9))
    k2 = _mix(k1 + 0x9E3779B9)
    offsets = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    x = tl.load(x_ptr + offsets, mask=mask).to(tl.float32)
    high = (offsets >> 32).to(tl.uint32)
    h = _mix(_mix(offsets.to(tl.uint32) ^ k1) ^ k2 ^ (high * 0x9E3779B9))
    keep = (h >> 8) >= threshold.to(tl.uint32, bitcast=True)
    y = x * tl.where(keep, scale, 0.0)  # x · 0: a dropped NaN or inf gives NaN, as torch
    tl.store(y_ptr + offsets, y.to(y_ptr.dtype.element_ty), mask=mask)


def _int32_bits(v: int) -> int:
    """The int32 with the bits of the uint32 ``v``."""
    return v - 2**32 if v >= 2**31 else v


class DropoutTriton(ElementwiseTriton):
    op = "dropout"
    kernel = _dropout_kernel

    def arguments(self, call: Call) -> tuple[tuple, dict[str, Any]]:
        p = call.params["p"]
        seed_lo, seed_hi = seed_halves(call.params["seed"])
        return (_int32_bits(seed_lo), _int32_bits(seed_hi), threshold(p), scale(p)), {}
