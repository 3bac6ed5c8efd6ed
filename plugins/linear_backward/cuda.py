"""linear's gradients in raw CUDA: two products on the shared GEMM core (gemm.cuh) — tensor cores for
fp16/bf16, SIMT float32 — and the bias gradient as deterministic two-pass column sums."""

from __future__ import annotations

import torch
from kernelzoo_plugins.linear import rows
from kernelzoo_plugins.linear.cuda import GemmCudaImplementation, aligned

from kernelzoo.backends.cuda import I64
from kernelzoo.registry import Call

from . import gradient_shapes

ROWS_PER_SPLIT = 256  # rows one column_sums block adds: M = 8192 gives 32 splits × N/32 column blocks


def column_sums(impl: GemmCudaImplementation, call: Call, config: dict, x: torch.Tensor, ld: int, rows: int,
                cols: int, out: torch.Tensor) -> None:
    """out[j] = Σ_i x[i·ld + j] for j < cols, through the column_sums kernels of ``impl``'s source."""
    splits = max(1, -(-rows // ROWS_PER_SPLIT))
    partial = torch.empty((splits, cols), dtype=torch.float32, device=x.device)
    impl.kernel("column_sums", call.dtype, config)(x, partial, rows, cols, I64(ld), ROWS_PER_SPLIT,
                                                   grid=(-(-cols // 32), splits), block=(32, 8))
    impl.kernel("column_sums_finish", call.dtype, config)(partial, out, splits, cols, grid=-(-cols // 256),
                                                          block=256)


class LinearBackwardCuda(GemmCudaImplementation):
    op = "linear_backward"

    def run(self, call: Call, config: dict) -> tuple[torch.Tensor, ...]:
        g2, x2 = rows(call.inputs["grad_out"]).contiguous(), rows(call.inputs["x"]).contiguous()
        w = call.inputs["weight"].contiguous()
        outs = tuple(call.empty(shape) for shape in gradient_shapes(call))
        gx, gw = rows(outs[0]), outs[1]
        (m, k), n = x2.shape, w.shape[0]
        vec = self.vec(call.dtype)
        kind = "aligned" if k % vec == 0 and n % vec == 0 and aligned(g2, x2, w) else "guarded"
        if gx.numel():
            self.launch_gemm(call, f"grad_x_{kind}", config, True, False, (g2, w, gx, m, n, k),
                             self.tiles(m, k, config))
        if gw.numel():  # with no tokens (M = 0) an empty sum: the kernel writes zeros
            self.launch_gemm(call, f"grad_w_{kind}", config, False, False, (g2, x2, gw, m, n, k),
                             self.tiles(n, k, config))
        if call.params["bias"] and n:
            column_sums(self, call, config, g2, n, m, n, outs[2])
        return outs
