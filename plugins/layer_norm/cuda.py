"""layer_norm in raw CUDA, compiled by NVRTC: a row in registers by a warp or a block when THREADS * ITEMS
holds it (two-pass statistics, exact; a warp or block for every row, or a grid of blocks_per_sm blocks per SM
walking the rows, the next one prefetched with PREFETCH); on sm_90, by a cluster of CLUSTER blocks when CLUSTER
times that holds it; else a looped kernel (shifted sums, then a second pass)."""

from __future__ import annotations

import math

import torch
from kernelzoo_plugins._rows.cuda import MAX_COLS, row_cluster, sm_count, vector_ok

from kernelzoo.backends.cuda import I64, CudaImplementation
from kernelzoo.errors import UnsupportedError
from kernelzoo.registry import Call

from . import as_rows, stats_shape


class LayerNormCuda(CudaImplementation):
    op = "layer_norm"
    # THREADS: threads per block (the most a row gets); ITEMS: elements per thread, in registers; CLUSTER:
    # the most blocks a row longer than a block's THREADS * ITEMS is split over (sm_90; a row gets as few as
    # hold it, row_cluster)
    # blocks_per_sm: rows that fit a warp or a block are walked by a grid of that many THREADS-thread blocks per
    # SM (0: a warp or block for every row); PREFETCH: a warp or block walking rows loads its next row before
    # this row's sums
    config_space = {"THREADS": [128, 256, 512, 1024], "ITEMS": [1, 2, 4, 8, 16, 32], "CLUSTER": [2, 4, 8],
                    "blocks_per_sm": [0, 1, 2, 4], "PREFETCH": [0, 1]}
    # 8192 columns in registers: 16 per thread (4 fp32 or 2 fp16 16-byte loads in flight), blocks of 512;
    # clusters of 8 (the most every sm_90 GPU runs) hold rows of 65536
    default_config = {"THREADS": 512, "ITEMS": 16, "CLUSTER": 8, "blocks_per_sm": 0, "PREFETCH": 0}
    # rows of 65536 over 8 blocks of 256 × 32: the fastest config at 1024 × 65536 (then 512 × 32 over 4;
    # docs/design/rows.md), which a short search over this space need not find
    # rows of 1024 by blocks of 128 threads walking them, 8 blocks an SM (about 4 rows each at 4096 rows), the next
    # row prefetched: 77-79 % at 4096 × 1024 against 72 % for the best config of a block a row (16 blocks an SM,
    # about 2 rows each: 72 % too)
    tuning_seeds = ({"THREADS": 256, "ITEMS": 32, "CLUSTER": 8},
                    {"THREADS": 512, "ITEMS": 8, "blocks_per_sm": 2, "PREFETCH": 1})

    def run(self, call: Call, config: dict) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        x, shape = call.inputs["x"], call.params["normalized_shape"]
        n = math.prod(shape)
        x2d = as_rows(x, n)  # (rows, n), column stride 1
        rows = x2d.shape[0]
        if n > MAX_COLS or rows >= 1 << 31:
            raise UnsupportedError(f"layer_norm/cuda: rows of up to {MAX_COLS} elements and fewer than 2^31 rows, "
                                   f"got {rows} x {n}")
        y = call.empty((rows, n))
        mean, rstd = call.empty((rows,), torch.float32), call.empty((rows,), torch.float32)
        w, b = (t.contiguous() if t is not None else None for t in (call.inputs.get("weight"), call.inputs.get("bias")))
        if n == 0:
            mean.fill_(math.nan), rstd.fill_(math.nan)
        elif rows:
            self._launch(x2d, w, b, y, mean, rstd, call.params["eps"], config)
        stats = stats_shape(x, shape)
        return y.view(x.shape), mean.view(stats), rstd.view(stats)

    def _launch(self, x: torch.Tensor, w: torch.Tensor | None, b: torch.Tensor | None, y: torch.Tensor,
                mean: torch.Tensor, rstd: torch.Tensor, eps: float, config: dict) -> None:
        rows, n = x.shape
        threads, items, stride = config["THREADS"], config["ITEMS"], x.stride(0)
        pack = min(16 // x.element_size(), items)
        suffix = "_vec" if vector_ok(pack, n, (stride,), rows, x, y, w, b) else "_scalar"
        # blocks of THREADS threads in a grid whose groups walk the rows (0: a group for every row)
        budget = sm_count(x.device) * config["blocks_per_sm"] or rows
        if n <= 32 * items:  # a warp per row, up to THREADS / 32 rows per block
            rows_per_block = min(threads // 32, rows)
            grid = min((rows + rows_per_block - 1) // rows_per_block, budget)
            self.kernel("ln_fits" + suffix, x.dtype, config)(
                x, w, b, y, mean, rstd, rows, n, I64(stride), 32, eps, grid=grid, block=32 * rows_per_block)
        elif n <= threads * items:  # a block per row, of just enough warps to hold it
            block = min(threads, ((n + items - 1) // items + 31) // 32 * 32)
            grid = min(rows, budget * max(1, threads // block))
            self.kernel("ln_fits" + suffix, x.dtype, config)(x, w, b, y, mean, rstd, rows, n, I64(stride), block, eps,
                                                              grid=grid, block=block)
        elif cluster := row_cluster(n, threads * items, config["CLUSTER"], x.device):  # a cluster of blocks per row
            self.kernel("ln_cluster" + suffix, x.dtype, {**config, "CLUSTER": cluster})(
                x, w, b, y, mean, rstd, n, I64(stride), eps, grid=rows * cluster, block=threads)
        else:
            self.kernel("ln_looped" + suffix, x.dtype, config)(x, w, b, y, mean, rstd, n, I64(stride), eps,
                                                                grid=rows, block=threads)
