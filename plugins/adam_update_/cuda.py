"""adam_update_ in raw CUDA, compiled by NVRTC: one pass, 16-byte accesses, ITEMS packs per thread in flight."""

from __future__ import annotations

import torch
from kernelzoo_plugins._optim.spec import STATE, dense_run, scalars

from kernelzoo.backends.cuda import I64, CudaImplementation
from kernelzoo.registry import Call


class AdamUpdateCuda(CudaImplementation):
    op = "adam_update_"
    config_space = {"THREADS": [128, 256, 512, 1024], "ITEMS": [1, 2, 4, 8]}
    default_config = {"THREADS": 256, "ITEMS": 2}

    def run(self, call: Call, config: dict) -> tuple[torch.Tensor, ...]:
        c, s = call.params, scalars(call)

        def update(t: dict[str, torch.Tensor]) -> None:
            p, g, m, v, v_max = (t[name] for name in STATE)
            v_max = v_max if c["amsgrad"] else None
            n, threads, items = p.numel(), config["THREADS"], config["ITEMS"]
            vec = all(x.data_ptr() % 16 == 0 for x in (p, g, m, v, v_max) if x is not None)
            per_block = threads * items * (16 // p.element_size() if vec else 1)
            kernel = self.kernel("adam_update_vec" if vec else "adam_update_scalar", p.dtype, config)
            kernel(p, g, m, v, v_max, I64(n), s["step_size"], s["bc2_sqrt"], 1 - c["beta1"], c["beta2"], c["eps"],
                   c["weight_decay"], s["decay"], int(c["decoupled"]), int(c["amsgrad"]),
                   grid=max(1, (n + per_block - 1) // per_block), block=threads)
        return dense_run(call, STATE, update)
