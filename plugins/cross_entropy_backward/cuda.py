"""cross_entropy_backward in raw CUDA, compiled by NVRTC: a block per row, one pass from lse, 16-byte accesses
from each row's first 16-byte boundary; the count of a mean taken on the device first."""

from __future__ import annotations

import torch
from kernelzoo_plugins._rows.cross_entropy import REDUCTIONS, from_rows
from kernelzoo_plugins._rows.cuda import MAX_COLS

from kernelzoo.backends.cuda import I64, CudaImplementation
from kernelzoo.errors import UnsupportedError
from kernelzoo.registry import Call

from . import rows_of


class CrossEntropyBackwardCuda(CudaImplementation):
    op = "cross_entropy_backward"
    # THREADS: threads per block (a block per row); ITEMS: elements per thread per step, loaded before use
    config_space = {"THREADS": [128, 256, 512, 1024], "ITEMS": [4, 8, 16, 32]}
    default_config = {"THREADS": 512, "ITEMS": 16}

    def run(self, call: Call, config: dict) -> torch.Tensor:
        x2d, target, lse = rows_of(call)
        p = call.params
        rows, classes = x2d.shape
        if classes > MAX_COLS or rows >= 1 << 31:
            raise UnsupportedError(f"cross_entropy_backward/cuda: up to {MAX_COLS} classes and fewer than 2^31 "
                                   f"rows, got {rows} x {classes}")
        out = call.empty((rows, classes))
        grad = call.inputs["grad_loss"].reshape(-1).contiguous()
        reduction = REDUCTIONS.index(p["reduction"])
        count = torch.empty((), dtype=torch.float32, device=x2d.device)
        if reduction == 1 and rows:
            self.kernel("ce_count", x2d.dtype, config)(target, count, I64(rows), I64(p["ignore_index"]), grid=1,
                                                       block=1024)
        threads, items, size = config["THREADS"], config["ITEMS"], x2d.element_size()
        # every row of the logits as misaligned as the gradient's: the same 16-byte split fits both
        same = (x2d.data_ptr() - out.data_ptr()) % 16 == 0 and (x2d.stride(0) - classes) * size % 16 == 0
        block = min(threads, max(32, ((classes + items - 1) // items + 31) // 32 * 32))
        self.kernel("ce_grad_vec" if same else "ce_grad_scalar", x2d.dtype, config)(
            x2d, target, lse, grad, count, out, classes, I64(x2d.stride(0)), I64(p["ignore_index"]),
            p["label_smoothing"], reduction, grid=rows, block=block)
        return from_rows(out, call.inputs["logits"])
