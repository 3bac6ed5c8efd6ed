"""softmax in raw CUDA, compiled by NVRTC: a row in registers by a warp or a block when
THREADS * ITEMS holds it, else a looped online kernel (split into chunks when rows are few)."""

from __future__ import annotations

import torch
from kernelzoo_plugins._rows.softmax_cuda import SoftmaxRowsCuda, chunks_of

from kernelzoo.backends.cuda import I64, CudaImplementation, Kernel


class SoftmaxCuda(SoftmaxRowsCuda, CudaImplementation):
    op = "softmax"
    # THREADS: threads per block (the most a row gets); ITEMS: elements per thread, in registers
    config_space = {"THREADS": [128, 256, 512, 1024], "ITEMS": [1, 2, 4, 8, 16, 32]}
    # 8192 columns in registers: 16 per thread (fp32: 4 accesses of 16 bytes in flight), 40
    # registers, so 3 blocks of 512 per SM
    default_config = {"THREADS": 512, "ITEMS": 16}

    def _launch(self, x: torch.Tensor, y: torch.Tensor, config: dict) -> None:
        rows, cols = x.shape
        threads, items, stride = config["THREADS"], config["ITEMS"], x.stride(0)
        # 16-byte accesses need cols, the row stride and both pointers to be multiples of them
        pack = min(16 // x.element_size(), items)
        vec = pack > 1 and cols % pack == 0 and (stride % pack == 0 or rows == 1) and all(
            t.data_ptr() % (pack * t.element_size()) == 0 for t in (x, y))
        suffix = "_vec" if vec else "_scalar"

        def kernel(name: str) -> Kernel:
            return self.kernel(name + suffix, x.dtype, config)

        if cols <= 32 * items:  # a warp per row, up to THREADS / 32 rows per block
            rows_per_block = min(threads // 32, rows)
            kernel("softmax_fits")(x, y, rows, cols, I64(stride), 32,
                                   grid=(rows + rows_per_block - 1) // rows_per_block,
                                   block=32 * rows_per_block)
        elif cols <= threads * items:  # a block per row, of just enough warps to hold it
            block = min(threads, ((cols + items - 1) // items + 31) // 32 * 32)
            kernel("softmax_fits")(x, y, rows, cols, I64(stride), block, grid=rows, block=block)
        else:
            chunk_len, chunks = chunks_of(rows, cols, threads, items, x.device)
            if chunks == 1:
                kernel("softmax_looped")(x, y, cols, I64(stride), grid=rows, block=threads)
                return
            stats = torch.empty((rows, chunks, 2), dtype=torch.float32, device=x.device)  # (max, sum)
            kernel("softmax_chunk_stats")(x, stats, cols, I64(stride), chunk_len, grid=(chunks, rows),
                                          block=threads)
            kernel("softmax_chunk_write")(x, y, stats, cols, I64(stride), chunk_len, grid=(chunks, rows),
                                          block=threads)
