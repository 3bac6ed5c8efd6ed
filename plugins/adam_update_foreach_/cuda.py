"""adam_update_foreach_ in raw CUDA, compiled by NVRTC: one launch walks a device table of every entry's
addresses and size, with adam_update_'s 16-byte element update (cuda.cu includes its source)."""

from __future__ import annotations

import torch
from kernelzoo_plugins._optim.spec import scalars

from kernelzoo.backends.cuda import CudaImplementation
from kernelzoo.registry import Call

from . import OneLaunch, programs


class AdamUpdateForeachCuda(OneLaunch, CudaImplementation):
    op = "adam_update_foreach_"
    config_space = {"THREADS": [128, 256, 512], "ITEMS": [1, 2, 4], "WAVES": [2, 4, 8]}
    default_config = {"THREADS": 256, "ITEMS": 2, "WAVES": 4}

    def launch(self, call: Call, table: torch.Tensor, rows: list[tuple[int, ...]], config: dict) -> None:
        c, s = call.params, scalars(call)
        per_block = config["THREADS"] * config["ITEMS"] * (16 // call.dtype.itemsize)
        blocks = sum(-(-row[5] // per_block) for row in rows)
        kernel = self.kernel("adam_update_foreach", call.dtype, config)
        kernel(table, len(rows), s["step_size"], s["bc2_sqrt"], 1 - c["beta1"], c["beta2"], c["eps"],
               c["weight_decay"], s["decay"], int(c["decoupled"]), int(c["amsgrad"]),
               grid=programs(call.device, blocks, config["WAVES"]), block=config["THREADS"])
