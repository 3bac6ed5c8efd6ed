"""sgd_update_ in raw CUDA, compiled by NVRTC: one pass, 16-byte accesses, ITEMS packs per thread in flight."""

from __future__ import annotations

import torch
from kernelzoo_plugins._optim.spec import dense_run

from kernelzoo.backends.cuda import I64, CudaImplementation
from kernelzoo.registry import Call


class SgdUpdateCuda(CudaImplementation):
    op = "sgd_update_"
    config_space = {"THREADS": [128, 256, 512, 1024], "ITEMS": [1, 2, 4, 8]}
    default_config = {"THREADS": 256, "ITEMS": 4}

    def run(self, call: Call, config: dict) -> tuple[torch.Tensor, ...]:
        c = call.params

        def update(t: dict[str, torch.Tensor]) -> None:
            p, g, b = t["param"], t["grad"], t["momentum_buffer"] if c["momentum"] else None
            n, threads, items = p.numel(), config["THREADS"], config["ITEMS"]
            vec = all(x.data_ptr() % 16 == 0 for x in (p, g, b) if x is not None)
            per_block = threads * items * (16 // p.element_size() if vec else 1)
            kernel = self.kernel("sgd_update_vec" if vec else "sgd_update_scalar", p.dtype, config)
            kernel(p, g, b, I64(n), c["lr"], c["momentum"], c["dampening"], c["weight_decay"], int(c["nesterov"]),
                   grid=max(1, (n + per_block - 1) // per_block), block=threads)
        return dense_run(call, ("param", "grad", "momentum_buffer"), update)
