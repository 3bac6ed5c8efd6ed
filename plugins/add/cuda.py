"""add in raw CUDA, compiled by NVRTC: 16-byte accesses for dense same-shape inputs, else a
strided kernel over the merged layout (broadcast dimensions at stride 0, no expanded copies)."""

from __future__ import annotations

import numpy as np
import torch

from kernelzoo.backends.cuda import I64, CudaImplementation
from kernelzoo.registry import Call

from . import MAX_DIMS, Layout, dense_inputs, layout


def divider(d: int) -> tuple[int, int]:
    """(magic, shift) with (umulhi(i, magic) + i) >> shift == i // d for 0 <= i < 2**31, 1 <= d < 2**31
    (Granlund & Montgomery, as torch's IntDivider)."""
    shift = (d - 1).bit_length()  # the least s with 2**s >= d
    return ((1 << 32) * ((1 << shift) - d)) // d + 1, shift


def dim_args(plan: Layout) -> list[object]:
    """The strided kernels' per-dimension arguments, innermost dimension first, padded to MAX_DIMS."""
    args: list[object] = []
    dims = list(zip(reversed(plan.sizes), reversed(plan.a_strides), reversed(plan.b_strides)))
    for size, stride_a, stride_b in dims + [(1, 0, 0)] * (MAX_DIMS - len(dims)):
        magic, shift = divider(size)
        args += [I64(size), np.uint32(magic), np.uint32(shift), I64(stride_a), I64(stride_b)]
    return args


class AddCuda(CudaImplementation):
    op = "add"
    config_space = {"ITEMS": [1, 2, 4, 8], "THREADS": [128, 256, 512, 1024]}
    default_config = {"ITEMS": 2, "THREADS": 256}

    def run(self, call: Call, config: dict) -> torch.Tensor:
        a, b = call.inputs["a"], call.inputs["b"]
        plan = layout(a, b)
        if len(plan.sizes) > MAX_DIMS:
            a, b = dense_inputs(call)
            plan = layout(a, b)
        out = call.empty(torch.broadcast_shapes(a.shape, b.shape))
        n, alpha, threads = out.numel(), call.params["alpha"], config["THREADS"]
        if n == 0:
            return out
        per_block = threads * config["ITEMS"]
        if plan.contiguous:
            # 16-byte accesses need all three arrays 16-byte aligned (a slice may start anywhere)
            aligned = all(t.data_ptr() % 16 == 0 for t in (a, b, out))
            pack = 16 // out.element_size() if aligned else 1
            grid = max(1, -(-(n // pack) // per_block))  # one block at least: it does the n % pack tail
            kernel = self.kernel("add_vec" if aligned else "add_scalar", out.dtype, config)
            kernel(a, b, out, alpha, I64(n), grid=grid, block=threads)
            return out
        kernel = self.kernel("add_strided64" if n >= 2**31 else "add_strided32", out.dtype, config)
        kernel(a, b, out, alpha, I64(n), len(plan.sizes), *dim_args(plan), grid=-(-n // per_block),
               block=threads)
        return out
