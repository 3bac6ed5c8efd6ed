"""The wrappers of the elementwise CUDA kernels: each op's cuda.cu instantiates the shared kernels of unary.cuh or
binary.cuh (over strided.cuh's layout) with its expression, and its cuda.py subclasses one of these.

Unary kernels take 16-byte accesses where x and y are 16-byte aligned, one element per access otherwise, ITEMS of
them in flight per thread. Binary kernels do the same for dense same-shape inputs, else walk the merged layout
(broadcast dimensions at stride 0, no expanded copies) through the per-dimension arguments of :func:`dim_args`.
"""

from __future__ import annotations

from typing import ClassVar

import numpy as np
import torch

from kernelzoo.backends.cuda import I64, CudaImplementation
from kernelzoo.elementwise import MAX_DIMS, Layout, binary_plan
from kernelzoo.registry import Call


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


def grid_of(n: int, pack: int, per_block: int) -> int:
    """Blocks for n elements in packs of ``pack``, ``per_block`` packs a block; one block at least: it does the
    n % pack tail."""
    return max(1, -(-(n // pack) // per_block))


class UnaryCuda(CudaImplementation):
    """Base of the unary ops' cuda plugins; a subclass sets ``op`` and, where it has them, ``kernel_name`` or
    ``kernel_base`` and ``arguments``."""

    kernel_name: ClassVar[str] = "unary"  # the kernels <kernel_name>_vec and <kernel_name>_scalar
    config_space: ClassVar = {"ITEMS": [1, 2, 4, 8], "THREADS": [128, 256, 512, 1024]}
    default_config: ClassVar = {"ITEMS": 2, "THREADS": 256}

    def kernel_base(self, call: Call) -> str:
        """The call's kernels' name without the _vec / _scalar suffix."""
        return self.kernel_name

    def arguments(self, call: Call) -> tuple:
        """The kernel's arguments after n: a = 0 (pow passes its exponent)."""
        return (0.0,)

    def run(self, call: Call, config: dict) -> torch.Tensor:
        x = call.inputs["x"].contiguous()
        y = call.empty(x.shape)
        n = x.numel()
        if n == 0:
            return y
        # 16-byte accesses need 16-byte aligned arrays (a contiguous slice may start anywhere)
        pack = 16 // x.element_size() if x.data_ptr() % 16 == 0 and y.data_ptr() % 16 == 0 else 1
        name = f"{self.kernel_base(call)}_{'vec' if pack > 1 else 'scalar'}"
        kernel = self.kernel(name, x.dtype, config)
        kernel(x, y, I64(n), *self.arguments(call), grid=grid_of(n, pack, config["THREADS"] * config["ITEMS"]),
               block=config["THREADS"])
        return y


class BinaryCuda(CudaImplementation):
    """Base of the binary ops' cuda plugins (binary.cuh's kernels, named by the op's ``kernel_name(call)``);
    ``scalars`` are the kernels' arguments between out and n (add passes alpha)."""

    config_space: ClassVar = {"ITEMS": [1, 2, 4, 8], "THREADS": [128, 256, 512, 1024]}
    default_config: ClassVar = {"ITEMS": 2, "THREADS": 256}

    def kernel_base(self, call: Call) -> str:
        return call.op.kernel_name(call)

    def scalars(self, call: Call) -> tuple:
        return ()

    def run(self, call: Call, config: dict) -> torch.Tensor:
        a, b, plan, out = binary_plan(call)
        n, threads, name = out.numel(), config["THREADS"], self.kernel_base(call)
        if n == 0:
            return out
        per_block = threads * config["ITEMS"]
        if plan.contiguous:
            # 16-byte accesses need all three arrays 16-byte aligned (a slice may start anywhere)
            aligned = all(t.data_ptr() % 16 == 0 for t in (a, b, out))
            pack = 16 // out.element_size() if aligned else 1
            kernel = self.kernel(f"{name}_vec" if aligned else f"{name}_scalar", out.dtype, config)
            kernel(a, b, out, *self.scalars(call), I64(n), grid=grid_of(n, pack, per_block), block=threads)
            return out
        kernel = self.kernel(f"{name}_strided64" if n >= 2**31 else f"{name}_strided32", out.dtype, config)
        kernel(a, b, out, *self.scalars(call), I64(n), len(plan.sizes), *dim_args(plan), grid=-(-n // per_block),
               block=threads)
        return out
