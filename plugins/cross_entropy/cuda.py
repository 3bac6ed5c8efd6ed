"""cross_entropy in raw CUDA, compiled by NVRTC: a block per row, one pass (online max and sum), 16-byte
loads from each row's first 16-byte boundary; a one-block kernel reduces the rows' losses in order."""

from __future__ import annotations

import torch
from kernelzoo_plugins._rows.cuda import MAX_COLS

from kernelzoo.backends.cuda import I64, CudaImplementation
from kernelzoo.errors import UnsupportedError
from kernelzoo.registry import Call

from . import as_rows


class CrossEntropyCuda(CudaImplementation):
    op = "cross_entropy"
    # THREADS: threads per block (a block per row); ITEMS: elements per thread per step, loaded before use
    config_space = {"THREADS": [128, 256, 512, 1024], "ITEMS": [4, 8, 16, 32]}
    default_config = {"THREADS": 512, "ITEMS": 16}

    def run(self, call: Call, config: dict) -> tuple[torch.Tensor, torch.Tensor]:
        target, p = call.inputs["target"], call.params
        x2d = as_rows(call.inputs["logits"])  # (rows, c), class stride 1
        t = target.reshape(-1).contiguous()
        rows, classes = x2d.shape
        if classes > MAX_COLS or rows >= 1 << 31:
            raise UnsupportedError(f"cross_entropy/cuda: up to {MAX_COLS} classes and fewer than 2^31 rows, got "
                                   f"{rows} x {classes}")
        none = p["reduction"] == "none"
        loss = call.empty((rows,)) if none else torch.empty(rows, dtype=torch.float32, device=x2d.device)
        lse = call.empty((rows,), torch.float32)
        threads, items = config["THREADS"], config["ITEMS"]
        # a block of just enough warps for one step over the row, THREADS at most
        block = min(threads, max(32, ((classes + items - 1) // items + 31) // 32 * 32))
        self.kernel("ce_rows", x2d.dtype, config)(
            x2d, t, None if none else loss, loss if none else None, lse, classes, I64(x2d.stride(0)),
            I64(p["ignore_index"]), p["label_smoothing"], grid=rows, block=block)
        if none:
            return loss.view(target.shape), lse.view(target.shape)
        total = call.empty(())
        self.kernel("ce_reduce", x2d.dtype, config)(loss, t, total, I64(rows), I64(p["ignore_index"]),
                                                    int(p["reduction"] == "mean"), grid=1, block=1024)
        return total, lse.view(target.shape)
