"""Adam's element update as a @triton.jit helper: the one-tensor kernel (adam_update_) and the many-tensor one
(adam_update_foreach_) both call it on a block of offsets."""

from __future__ import annotations

import triton
import triton.language as tl


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
