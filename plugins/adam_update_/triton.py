"""adam_update_ in Triton: one program per BLOCK elements, the variant's branches compiled out."""

from __future__ import annotations

import torch
import triton
import triton.language as tl
from kernelzoo_plugins.sgd_update_ import dense_run

from kernelzoo.backends.triton import TritonImplementation, launcher
from kernelzoo.registry import Call

from . import STATE, scalars


@triton.jit
def adam_block(p_ptr, grad_ptr, m_ptr, v_ptr, v_max_ptr, offsets, mask, step_size, bc2_sqrt, w1, beta2, eps,
               weight_decay, decay, L2: tl.constexpr, SHRINK: tl.constexpr, AMSGRAD: tl.constexpr):
    """One block of elements (offsets, mask) updated in place, computed in float32."""
    p = tl.load(p_ptr + offsets, mask=mask).to(tl.float32)
    g = tl.load(grad_ptr + offsets, mask=mask).to(tl.float32)
    m = tl.load(m_ptr + offsets, mask=mask).to(tl.float32)
    v = tl.load(v_ptr + offsets, mask=mask).to(tl.float32)
    if SHRINK:  # AdamW's decoupled decay
        p = p * decay
    if L2:  # Adam's L2 term
        g = g + weight_decay * p
    m = tl.where(w1 < 0.5, m + w1 * (g - m), g - (g - m) * (1.0 - w1))  # torch's lerp
    v = v * beta2 + (1.0 - beta2) * g * g
    v_hat = v
    if AMSGRAD:
        old = tl.load(v_max_ptr + offsets, mask=mask).to(tl.float32)
        v_hat = tl.where((old != old) | (v != v), old + v, tl.maximum(old, v))  # NaN wins, as in torch.maximum
        tl.store(v_max_ptr + offsets, v_hat.to(v_max_ptr.dtype.element_ty), mask=mask)
    tl.store(m_ptr + offsets, m.to(m_ptr.dtype.element_ty), mask=mask)
    tl.store(v_ptr + offsets, v.to(v_ptr.dtype.element_ty), mask=mask)
    p = p - step_size * (m / (tl.sqrt(v_hat) / bc2_sqrt + eps))
    tl.store(p_ptr + offsets, p.to(p_ptr.dtype.element_ty), mask=mask)


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
            launcher(_adam_kernel)[(triton.cdiv(n, config["BLOCK"]),)](
                t["param"], t["grad"], t["exp_avg"], t["exp_avg_sq"], v_max, n, s["step_size"], s["bc2_sqrt"],
                1 - c["beta1"], c["beta2"], c["eps"], c["weight_decay"], s["decay"],
                L2=decay and not c["decoupled"], SHRINK=decay and c["decoupled"], AMSGRAD=c["amsgrad"],
                BLOCK=config["BLOCK"], num_warps=config["num_warps"])
        return dense_run(call, STATE, update)
