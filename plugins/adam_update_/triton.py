"""adam_update_ in Triton: one program per BLOCK elements, the variant's branches compiled out."""

from __future__ import annotations

import torch
import triton
import triton.language as tl
from kernelzoo_plugins._optim.spec import STATE, dense_run, scalars
from kernelzoo_plugins._optim.triton import adam_block

from kernelzoo.backends.triton import TritonImplementation, cdiv, launcher
from kernelzoo.registry import Call


@triton.jit
def _adam_kernel(p_ptr, grad_ptr, m_ptr, v_ptr, v_max_ptr, n, step_size, bc2_sqrt, w1, beta2, eps, weight_decay,
                 decay, L2: tl.constexpr, SHRINK: tl.constexpr, AMSGRAD: tl.constexpr, BLOCK: tl.constexpr):
    offsets = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    adam_block(p_ptr, grad_ptr, m_ptr, v_ptr, v_max_ptr, offsets, offsets < n, step_size, bc2_sqrt, w1, beta2,
               eps, weight_decay, decay, L2, SHRINK, AMSGRAD)


class AdamUpdateTriton(TritonImplementation):
    op = "adam_update_"
    config_space = {"BLOCK": [512, 1024, 2048, 4096], "num_warps": [2, 4, 8, 16]}
    default_config = {"BLOCK": 1024, "num_warps": 4}

    def run(self, call: Call, config: dict) -> tuple[torch.Tensor, ...]:
        c, s = call.params, scalars(call)

        def update(t: dict[str, torch.Tensor]) -> None:
            n = t["param"].numel()
            v_max = t["max_exp_avg_sq"] if c["amsgrad"] else t["exp_avg_sq"]  # not read without amsgrad
            decay = c["weight_decay"] != 0
            launcher(_adam_kernel)[(cdiv(n, config["BLOCK"]),)](
                t["param"], t["grad"], t["exp_avg"], t["exp_avg_sq"], v_max, n, s["step_size"], s["bc2_sqrt"],
                1 - c["beta1"], c["beta2"], c["eps"], c["weight_decay"], s["decay"],
                L2=decay and not c["decoupled"], SHRINK=decay and c["decoupled"], AMSGRAD=c["amsgrad"],
                BLOCK=config["BLOCK"], num_warps=config["num_warps"])
        return dense_run(call, STATE, update)
