"""gelu in raw CUDA, compiled by NVRTC: 16-byte accesses, ITEMS of them in flight per thread."""

from __future__ import annotations

import torch

from kernelzoo.backends.cuda import I64, CudaImplementation
from kernelzoo.registry import Call


class GeluCuda(CudaImplementation):
    op = "gelu"
    config_space = {"ITEMS": [1, 2, 4, 8], "THREADS": [128, 256, 512, 1024]}
    default_config = {"ITEMS": 2, "THREADS": 256}

    def run(self, call: Call, config: dict) -> torch.Tensor:
        x = call.inputs["x"].contiguous()
        y = call.empty(x.shape)
        n = x.numel()
        if n == 0:
            return y
        # 16-byte accesses need 16-byte aligned arrays (a contiguous slice may start anywhere)
        pack = 16 // x.element_size() if x.data_ptr() % 16 == 0 and y.data_ptr() % 16 == 0 else 1
        name = f"gelu_{'tanh' if call.params['approximate'] == 'tanh' else 'erf'}_{'vec' if pack > 1 else 'scalar'}"
        per_block = config["THREADS"] * config["ITEMS"]
        grid = max(1, -(-(n // pack) // per_block))  # one block at least: it does the n % pack tail
        self.kernel(name, x.dtype, config)(x, y, I64(n), grid=grid, block=config["THREADS"])
        return y
