"""layer_norm_backward in raw CUDA, compiled by NVRTC: rows in registers by a warp or a block, each group of
threads taking every slots-th row and keeping its grad_weight / grad_bias partial row in registers; on sm_90,
longer rows split over a cluster of up to CLUSTER blocks the same way; rows longer still by a row-statistics
kernel and a tiled kernel; a second small kernel adds the partial rows in order (on sm_90 launched as the row
kernel's programmatic dependent, so that its launch overlaps the row kernel)."""

from __future__ import annotations

import torch
from kernelzoo_plugins._rows.cuda import MAX_COLS, has_clusters, row_cluster, sm_count, vector_ok

from kernelzoo.backends.cuda import I64, CudaImplementation
from kernelzoo.errors import UnsupportedError
from kernelzoo.registry import Call

from . import rows_of

_MAX_PART_SHARED = 64 << 10  # the most shared memory a block of lnb_fits_pc holds its partial rows in


def reduce_lanes(slots: int) -> int:
    """Threads per column of the second stage (a power of two, 1 to 32): about one for every 8 partial rows."""
    return min(32, 1 << max(0, (slots // 8).bit_length() - 1))


class LayerNormBackwardCuda(CudaImplementation):
    op = "layer_norm_backward"
    # THREADS: threads per block (the most a row gets); ITEMS: elements per thread, in registers;
    # blocks_per_sm: the grid's size (so the number of partial rows) per SM, for THREADS-thread blocks;
    # CLUSTER: the most blocks a row longer than a block's THREADS * ITEMS is split over (sm_90; a row gets
    # as few as hold it); PREFETCH: each warp, block or cluster loads its next row before this row's sums
    # PART_CLUSTER: where a block holds a row (sm_90), clusters of that many blocks add their partial rows
    # into one before the second stage (1: each block writes its own)
    config_space = {"THREADS": [128, 256, 512, 1024], "ITEMS": [1, 2, 4, 8, 16, 32], "blocks_per_sm": [1, 2, 4],
                    "CLUSTER": [2, 4, 8], "PREFETCH": [0, 1], "PART_CLUSTER": [1, 2, 4, 8]}
    default_config = {"THREADS": 512, "ITEMS": 16, "blocks_per_sm": 2, "CLUSTER": 8, "PREFETCH": 0,
                      "PART_CLUSTER": 1}
    # rows of 65536 over clusters of 8 blocks of 256 × 32, a grid of 4 blocks per SM, faster at 1024 × 65536 than
    # what a short search stores; rows of 1024 by blocks of 128 × 8 with the next row prefetched, the fastest at
    # 4096 × 1024 (docs/design/rows.md)
    # the kernel after a row kernel starts before it ends, waiting inside for its writes (sm_90; see the .cu)
    dependent_launch = True
    tuning_seeds = ({"THREADS": 256, "ITEMS": 32, "blocks_per_sm": 4, "CLUSTER": 8},
                    {"THREADS": 512, "ITEMS": 8, "blocks_per_sm": 1, "PREFETCH": 1})

    def run(self, call: Call, config: dict) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        dy, x, mean, rstd, n = rows_of(call)
        rows, shape = x.shape[0], call.params["normalized_shape"]
        if n > MAX_COLS or rows >= 1 << 31:
            raise UnsupportedError(f"layer_norm_backward/cuda: rows of up to {MAX_COLS} elements and fewer than "
                                   f"2^31 rows, got {rows} x {n}")
        dx, dw, db = call.empty((rows, n)), call.empty((n,)), call.empty((n,))
        if n:
            w = call.inputs["weight"].contiguous() if "weight" in call.inputs else None
            slots, part, early = self._rows(dy, x, mean, rstd, w, dx, config)
            lanes = reduce_lanes(slots)
            cols = 512 // lanes  # a block of 512 threads
            self.kernel("lnb_reduce", x.dtype, config)(part[0], part[1], dw, db, slots, n,
                                                       grid=((n + cols - 1) // cols, 2), block=(cols, lanes),
                                                       dependent=early and self.dependent_launch)
        return dx.view(call.inputs["x"].shape), dw.view(shape), db.view(shape)

    def _rows(self, dy: torch.Tensor, x: torch.Tensor, mean: torch.Tensor, rstd: torch.Tensor,
              w: torch.Tensor | None, dx: torch.Tensor, config: dict) -> tuple[int, torch.Tensor, bool]:
        """Launch the row kernels; (slots, the (2, slots, n) float partial rows of grad_weight and grad_bias,
        whether the last row kernel lets the next kernel start early)."""
        rows, n = x.shape
        threads, items = config["THREADS"], config["ITEMS"]
        strides = (I64(dy.stride(0)), I64(x.stride(0)))
        pack = min(16 // x.element_size(), items)
        suffix = "_vec" if vector_ok(pack, n, (dy.stride(0), x.stride(0)), rows, dy, x, dx, w) else "_scalar"
        budget = sm_count(x.device) * config["blocks_per_sm"]  # blocks of THREADS threads in the grid
        if n <= threads * items:
            if n <= 32 * items:  # a warp per row
                group, block = 32, threads
                grid = max(1, min((rows * 32 + block - 1) // block, budget))
            else:  # a block per row, of just enough warps to hold it
                group = block = min(threads, ((n + items - 1) // items + 31) // 32 * 32)
                grid = max(1, min(rows, budget * max(1, threads // block)))
            # clusters of PART_CLUSTER blocks of a row each adding their partial rows into one (sm_90), in
            # shared_mem bytes of each block; else a partial row per block
            together, shared = config["PART_CLUSTER"], 2 * items * block * 4
            if not (group == block and together > 1 and has_clusters(x.device) and shared <= _MAX_PART_SHARED):
                together, shared = 1, 0
            grid = (grid + together - 1) // together * together  # whole clusters
            slots = grid // together
            part = torch.empty((2, slots, n), dtype=torch.float32, device=x.device)
            self.kernel("lnb_fits" + ("_pc" if together > 1 else "") + suffix, x.dtype, config)(
                dy, x, mean, rstd, w, dx, part[0], part[1], rows, n, *strides, group, grid=grid, block=block,
                shared_mem=shared)
            return slots, part, True
        if cluster := row_cluster(n, threads * items, config["CLUSTER"], x.device):  # a cluster of blocks per row
            slots = max(1, min(rows, budget // cluster))
            part = torch.empty((2, slots, n), dtype=torch.float32, device=x.device)
            self.kernel("lnb_cluster" + suffix, x.dtype, {**config, "CLUSTER": cluster})(
                dy, x, mean, rstd, w, dx, part[0], part[1], rows, n, *strides, grid=slots * cluster, block=threads)
            return slots, part, True
        stats = torch.empty((rows, 2), dtype=torch.float32, device=x.device)  # (c1, c2) per row
        self.kernel("lnb_row_stats" + suffix, x.dtype, config)(dy, x, mean, rstd, w, stats, n, *strides,
                                                               grid=rows, block=threads)
        rows_per_slot = max(1, (rows + budget - 1) // budget)
        slots = (rows + rows_per_slot - 1) // rows_per_slot
        part = torch.empty((2, slots, n), dtype=torch.float32, device=x.device)
        self.kernel("lnb_looped" + suffix, x.dtype, config)(dy, x, mean, rstd, w, stats, dx, part[0], part[1], rows,
                                                            n, *strides, rows_per_slot, grid=slots, block=threads)
        return slots, part, False
