"""sgd_update_ in Triton: one program per BLOCK elements, the variant's branches compiled out."""

from __future__ import annotations

import torch
import triton
import triton.language as tl
from kernelzoo_plugins._optim.spec import dense_run

from kernelzoo.backends.triton import TritonImplementation, cdiv, launcher
from kernelzoo.registry import Call


@triton.jit
def _sgd_kernel(p_ptr, grad_ptr, buf_ptr, n, lr, momentum, dampening, weight_decay,
                MOMENTUM: tl.constexpr, NESTEROV: tl.constexpr, WEIGHT_DECAY: tl.constexpr, BLOCK: tl.constexpr):
    offsets = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    p = tl.load(p_ptr + offsets, mask=mask).to(tl.float32)
    g = tl.load(grad_ptr + offsets, mask=mask).to(tl.float32)
    if WEIGHT_DECAY:
        g = g + weight_decay * p
    if MOMENTUM:
        buf = momentum * tl.load(buf_ptr + offsets, mask=mask).to(tl.float32) + (1.0 - dampening) * g
        tl.store(buf_ptr + offsets, buf.to(buf_ptr.dtype.element_ty), mask=mask)
        g = g + momentum * buf if NESTEROV else buf
    tl.store(p_ptr + offsets, (p - lr * g).to(p_ptr.dtype.element_ty), mask=mask)


class SgdUpdateTriton(TritonImplementation):
    op = "sgd_update_"
    config_space = {"BLOCK": [512, 1024, 2048, 4096, 8192], "num_warps": [2, 4, 8, 16]}
    default_config = {"BLOCK": 2048, "num_warps": 8}

    def run(self, call: Call, config: dict) -> tuple[torch.Tensor, ...]:
        c = call.params

        def update(t: dict[str, torch.Tensor]) -> None:
            n = t["param"].numel()
            buf = t["momentum_buffer"] if c["momentum"] else t["param"]  # not read without momentum
            launcher(_sgd_kernel)[(cdiv(n, config["BLOCK"]),)](
                t["param"], t["grad"], buf, n, c["lr"], c["momentum"], c["dampening"], c["weight_decay"],
                MOMENTUM=c["momentum"] != 0, NESTEROV=c["nesterov"], WEIGHT_DECAY=c["weight_decay"] != 0,
                BLOCK=config["BLOCK"], num_warps=config["num_warps"])
        return dense_run(call, ("param", "grad", "momentum_buffer"), update)
