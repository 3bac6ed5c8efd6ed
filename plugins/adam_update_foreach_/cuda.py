"""adam_update_foreach_ in raw CUDA, compiled by NVRTC: one launch walks a device table of every entry's
addresses and size, with adam_update_'s 16-byte element update (cuda.cu includes its source)."""

from __future__ import annotations

from kernelzoo.backends.cuda import CudaImplementation
from kernelzoo.registry import Call

from . import TableCache, dense_lists, outputs_of, programs, scalars_of, table_rows


class AdamUpdateForeachCuda(CudaImplementation):
    op = "adam_update_foreach_"
    config_space = {"THREADS": [128, 256, 512], "ITEMS": [1, 2, 4], "WAVES": [2, 4, 8]}
    default_config = {"THREADS": 256, "ITEMS": 2, "WAVES": 4}

    def __init__(self) -> None:
        self.tables = TableCache()

    def run(self, call: Call, config: dict) -> tuple:
        dense, write_back = dense_lists(call)
        rows = table_rows(dense)
        if rows:
            c, s = call.params, scalars_of(call)
            per_block = config["THREADS"] * config["ITEMS"] * (16 // call.dtype.itemsize)
            blocks = sum(-(-row[5] // per_block) for row in rows)
            kernel = self.kernel("adam_update_foreach", call.dtype, config)
            kernel(self.tables.get(rows, call.device), len(rows), s["step_size"], s["bc2_sqrt"], 1 - c["beta1"],
                   c["beta2"], c["eps"], c["weight_decay"], s["decay"], int(c["decoupled"]), int(c["amsgrad"]),
                   grid=programs(call.device, blocks, config["WAVES"]), block=config["THREADS"])
        write_back()
        return outputs_of(call)
