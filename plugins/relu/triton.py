"""relu in Triton: one program per BLOCK elements."""

from __future__ import annotations

import triton
import triton.language as tl

from kernelzoo.backends.triton_unary import ElementwiseTriton


@triton.jit
def _relu_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    x = tl.load(x_ptr + offsets, mask=mask)
    tl.store(y_ptr + offsets, tl.where(x < 0, 0.0, x).to(x.dtype), mask=mask)


class ReluTriton(ElementwiseTriton):
    op = "relu"
    kernel = _relu_kernel
