"""softmax in raw CUDA, compiled by NVRTC: a row in registers by a warp or a block when
THREADS * ITEMS holds it, else a looped online kernel (split into chunks when rows are few)."""

from __future__ import annotations

import torch
from kernelzoo_plugins._rows.cuda import RESIDENT_THREADS_PER_SM, sm_count, too_large

from kernelzoo.backends.cuda import I64, CudaImplementation, Kernel
from kernelzoo.errors import UnsupportedError
from kernelzoo.registry import Call

from . import as_rows, from_rows


class SoftmaxCuda(CudaImplementation):
    op = "softmax"
    # THREADS: threads per block (the most a row gets); ITEMS: elements per thread, in registers
    config_space = {"THREADS": [128, 256, 512, 1024], "ITEMS": [1, 2, 4, 8, 16, 32]}
    # 8192 columns in registers: 16 per thread (fp32: 4 accesses of 16 bytes in flight), 40
    # registers, so 3 blocks of 512 per SM
    default_config = {"THREADS": 512, "ITEMS": 16}

    def supports(self, call: Call) -> str | None:
        sizes = call.op.sizes(call)
        return super().supports(call) or too_large(sizes["rows"], sizes["cols"])

    def run(self, call: Call, config: dict) -> torch.Tensor:
        x, dim = call.inputs["x"], call.params["dim"]
        x2d = as_rows(x, dim)  # (rows, cols), column stride 1
        rows, cols = x2d.shape
        if why := too_large(rows, cols):
            raise UnsupportedError(f"softmax/cuda {why}")
        y2d = call.empty((rows, cols))
        if rows and cols:
            self._launch(x2d, y2d, config)
        return from_rows(y2d, x, dim)

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
            tile = threads * items
            tiles = (cols + tile - 1) // tile
            in_flight = sm_count(x.device) * max(1, RESIDENT_THREADS_PER_SM // threads)
            chunks = min(tiles, (in_flight + rows - 1) // rows)
            if chunks == 1:
                kernel("softmax_looped")(x, y, cols, I64(stride), grid=rows, block=threads)
                return
            # rows split into chunks of whole tiles (tile boundaries keep 16-byte alignment)
            chunk_len = (tiles + chunks - 1) // chunks * tile
            chunks = (cols + chunk_len - 1) // chunk_len
            stats = torch.empty((rows, chunks, 2), dtype=torch.float32, device=x.device)  # (max, sum)
            kernel("softmax_chunk_stats")(x, stats, cols, I64(stride), chunk_len, grid=(chunks, rows),
                                          block=threads)
            kernel("softmax_chunk_write")(x, y, stats, cols, I64(stride), chunk_len, grid=(chunks, rows),
                                          block=threads)
