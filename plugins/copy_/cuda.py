"""copy_ in raw CUDA, compiled by NVRTC: 16-byte accesses for dense dst and src of one shape, else a
strided kernel over the merged layout (dst's dimensions in its memory order, src broadcast at stride 0)."""

from __future__ import annotations

import torch
from kernelzoo_plugins._elementwise.cuda import dim_args, grid_of

from kernelzoo.backends.cuda import I64, CudaImplementation
from kernelzoo.elementwise import Layout
from kernelzoo.registry import Call

from . import copy_parts


class CopyCuda(CudaImplementation):
    op = "copy_"
    config_space = {"ITEMS": [1, 2, 4, 8], "THREADS": [128, 256, 512, 1024]}
    default_config = {"ITEMS": 4, "THREADS": 256}

    def run(self, call: Call, config: dict) -> torch.Tensor:
        for dst, src, plan in copy_parts(call.inputs["dst"], call.inputs["src"]):
            self._launch(dst, src, plan, config)
        return call.inputs["dst"]

    def _launch(self, dst: torch.Tensor, src: torch.Tensor, plan: Layout, config: dict) -> None:
        n, threads = dst.numel(), config["THREADS"]
        if n == 0:
            return
        per_block = threads * config["ITEMS"]
        if plan.contiguous:
            aligned = dst.data_ptr() % 16 == 0 and src.data_ptr() % 16 == 0
            pack = 16 // dst.element_size() if aligned else 1
            self.kernel("copy_vec" if aligned else "copy_scalar", dst.dtype, config)(
                dst, src, I64(n), grid=grid_of(n, pack, per_block), block=threads)
            return
        # dim_args gives operand a's strides (dst's) first, then b's (src's): the kernels' order
        kernel = self.kernel("copy_strided64" if n >= 2**31 else "copy_strided32", dst.dtype, config)
        kernel(dst, src, I64(n), len(plan.sizes), *dim_args(plan), grid=-(-n // per_block), block=threads)
