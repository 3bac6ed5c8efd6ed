"""softmax's gradient in raw CUDA, compiled by NVRTC: a row of grad and y in registers by a warp or a block
when THREADS * ITEMS holds it, else a looped two-pass kernel (split into chunks when rows are few)."""

from __future__ import annotations

import torch
from kernelzoo_plugins._rows.softmax_cuda import SoftmaxRowsCuda, chunks_of

from kernelzoo.backends.cuda import I64, CudaImplementation, Kernel


class SoftmaxBackwardCuda(SoftmaxRowsCuda, CudaImplementation):
    op = "softmax_backward"
    row_inputs = ("grad", "y")
    # THREADS: threads per block (the most a row gets); ITEMS: elements of grad and of y per thread, in
    # registers
    config_space = {"THREADS": [128, 256, 512, 1024], "ITEMS": [1, 2, 4, 8, 16]}
    # 8192 columns in registers, as softmax's default: 16 of each input per thread (fp32: 8 accesses of 16
    # bytes in flight)
    default_config = {"THREADS": 512, "ITEMS": 16}

    def _launch(self, g: torch.Tensor, y: torch.Tensor, dx: torch.Tensor, config: dict) -> None:
        rows, cols = y.shape
        threads, items = config["THREADS"], config["ITEMS"]
        strides = (I64(g.stride(0)), I64(y.stride(0)))
        # 16-byte accesses need cols, both row strides and the three pointers to be multiples of them
        pack = min(16 // y.element_size(), items)
        vec = (pack > 1 and cols % pack == 0 and (rows == 1 or all(s % pack == 0 for s in strides))
               and all(t.data_ptr() % (pack * t.element_size()) == 0 for t in (g, y, dx)))
        suffix = "_vec" if vec else "_scalar"

        def kernel(name: str) -> Kernel:
            return self.kernel(f"softmax_backward_{name}{suffix}", y.dtype, config)

        if cols <= 32 * items:  # a warp per row, up to THREADS / 32 rows per block
            rows_per_block = min(threads // 32, rows)
            kernel("fits")(g, y, dx, rows, cols, *strides, 32, grid=(rows + rows_per_block - 1) // rows_per_block,
                           block=32 * rows_per_block)
        elif cols <= threads * items:  # a block per row, of just enough warps to hold it
            block = min(threads, ((cols + items - 1) // items + 31) // 32 * 32)
            kernel("fits")(g, y, dx, rows, cols, *strides, block, grid=rows, block=block)
        else:
            chunk_len, chunks = chunks_of(rows, cols, threads, items, y.device)
            if chunks == 1:
                kernel("looped")(g, y, dx, cols, *strides, grid=rows, block=threads)
                return
            dots = torch.empty((rows, chunks), dtype=torch.float32, device=y.device)
            kernel("chunk_dot")(g, y, dots, cols, *strides, chunk_len, grid=(chunks, rows), block=threads)
            kernel("chunk_write")(g, y, dx, dots, cols, *strides, chunk_len, grid=(chunks, rows), block=threads)
