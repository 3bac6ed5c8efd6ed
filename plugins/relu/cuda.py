"""relu in raw CUDA, compiled by NVRTC: ITEMS elements per thread, coalesced."""

from __future__ import annotations

import torch

from kernelzoo.backends.cuda import I64, CudaImplementation
from kernelzoo.registry import Call


class ReluCuda(CudaImplementation):
    op = "relu"
    config_space = {"ITEMS": [1, 2, 4, 8], "threads": [128, 256, 512, 1024]}
    default_config = {"ITEMS": 4, "threads": 256}

    def run(self, call: Call, config: dict) -> torch.Tensor:
        x = call.inputs["x"].contiguous()
        y = call.empty(x.shape)
        n, per_block = x.numel(), config["threads"] * config["ITEMS"]
        kernel = self.kernel("relu", x.dtype, config)
        kernel(x, y, I64(n), grid=(n + per_block - 1) // per_block, block=config["threads"])
        return y
