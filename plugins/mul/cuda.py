"""mul in raw CUDA, compiled by NVRTC: 16-byte accesses for dense same-shape inputs, else a strided
kernel over the merged layout (broadcast dimensions at stride 0, no expanded copies).

:class:`BinaryCuda` is the wrapper of every binary op's cuda plugin: each op's cuda.cu instantiates
the shared kernels of ../_elementwise/binary.cuh under its ``kernel_name``.
"""

from __future__ import annotations

import torch
from kernelzoo_plugins.add.cuda import dim_args

from kernelzoo.backends.cuda import I64, CudaImplementation
from kernelzoo.elementwise import binary_plan
from kernelzoo.registry import Call


class BinaryCuda(CudaImplementation):
    """Base of the binary ops' cuda plugins (binary.cuh's kernels; the strided ones take add's
    ``dim_args``: the same per-dimension arguments as add's strided kernels)."""

    config_space = {"ITEMS": [1, 2, 4, 8], "THREADS": [128, 256, 512, 1024]}
    default_config = {"ITEMS": 2, "THREADS": 256}

    def run(self, call: Call, config: dict) -> torch.Tensor:
        a, b, plan, out = binary_plan(call)
        n, threads, name = out.numel(), config["THREADS"], call.op.kernel_name(call)
        if n == 0:
            return out
        per_block = threads * config["ITEMS"]
        if plan.contiguous:
            # 16-byte accesses need all three arrays 16-byte aligned (a slice may start anywhere)
            aligned = all(t.data_ptr() % 16 == 0 for t in (a, b, out))
            pack = 16 // out.element_size() if aligned else 1
            grid = max(1, -(-(n // pack) // per_block))  # one block at least: it does the n % pack tail
            kernel = self.kernel(f"{name}_vec" if aligned else f"{name}_scalar", out.dtype, config)
            kernel(a, b, out, I64(n), grid=grid, block=threads)
            return out
        kernel = self.kernel(f"{name}_strided64" if n >= 2**31 else f"{name}_strided32", out.dtype, config)
        kernel(a, b, out, I64(n), len(plan.sizes), *dim_args(plan), grid=-(-n // per_block), block=threads)
        return out


class MulCuda(BinaryCuda):
    op = "mul"
