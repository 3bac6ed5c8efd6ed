"""adam_update_foreach_ in Triton: one launch for all tensors. A table on the device holds each entry's
addresses and size; every program walks the entries and takes every WAVES·SMs-th block of each, so
large and small tensors spread over all SMs alike. The element update is adam_update_'s."""

from __future__ import annotations

import torch
import triton
import triton.language as tl
from kernelzoo_plugins._optim.spec import scalars
from kernelzoo_plugins._optim.triton import adam_block

from kernelzoo.backends.triton import TritonImplementation, cdiv, launcher
from kernelzoo.registry import Call

from . import OneLaunch, programs

ELEMENT = {torch.float32: tl.float32, torch.float16: tl.float16, torch.bfloat16: tl.bfloat16}


@triton.jit
def _adam_foreach_kernel(TABLE, tensors, step_size, bc2_sqrt, w1, beta2, eps, weight_decay, decay,
                         DTYPE: tl.constexpr, L2: tl.constexpr, SHRINK: tl.constexpr, AMSGRAD: tl.constexpr,
                         BLOCK: tl.constexpr):
    pid, stride = tl.program_id(0).to(tl.int64) * BLOCK, tl.num_programs(0).to(tl.int64) * BLOCK
    for t in range(0, tensors):
        row = TABLE + t * 6
        p_ptr = tl.load(row).to(tl.pointer_type(DTYPE))
        grad_ptr = tl.load(row + 1).to(tl.pointer_type(DTYPE))
        m_ptr = tl.load(row + 2).to(tl.pointer_type(DTYPE))
        v_ptr = tl.load(row + 3).to(tl.pointer_type(DTYPE))
        v_max_ptr = tl.load(row + 4).to(tl.pointer_type(DTYPE)) if AMSGRAD else v_ptr
        n = tl.load(row + 5)
        for start in range(pid, n, stride):
            offsets = start + tl.arange(0, BLOCK)
            adam_block(p_ptr, grad_ptr, m_ptr, v_ptr, v_max_ptr, offsets, offsets < n, step_size, bc2_sqrt, w1,
                       beta2, eps, weight_decay, decay, L2, SHRINK, AMSGRAD)


class AdamUpdateForeachTriton(OneLaunch, TritonImplementation):
    op = "adam_update_foreach_"
    config_space = {"BLOCK": [512, 1024, 2048, 4096], "num_warps": [2, 4, 8], "WAVES": [2, 4, 8]}
    default_config = {"BLOCK": 1024, "num_warps": 4, "WAVES": 4}

    def launch(self, call: Call, table: torch.Tensor, rows: list[tuple[int, ...]], config: dict) -> None:
        c, s = call.params, scalars(call)
        block = config["BLOCK"]
        blocks = sum(cdiv(row[5], block) for row in rows)
        decay = c["weight_decay"] != 0
        launcher(_adam_foreach_kernel)[(programs(call.device, blocks, config["WAVES"]),)](
            table, len(rows), s["step_size"], s["bc2_sqrt"], 1 - c["beta1"], c["beta2"], c["eps"], c["weight_decay"],
            s["decay"], DTYPE=ELEMENT[call.dtype], L2=decay and not c["decoupled"], SHRINK=decay and c["decoupled"],
            AMSGRAD=c["amsgrad"], BLOCK=block, num_warps=config["num_warps"])
