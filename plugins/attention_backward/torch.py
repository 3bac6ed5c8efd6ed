"""torch's own attention backward, the baseline, matching the torch plugin of the forward:

- CPU: ``aten._scaled_dot_product_flash_attention_for_cpu_backward``.
- CUDA, float16/bfloat16 without a mask: ``aten._scaled_dot_product_flash_attention_backward``
  (FlashAttention-2's backward; it reads the forward's random-number state only for dropout).
- Otherwise: torch.autograd.grad through ``scaled_dot_product_attention``, which runs the forward
  again before its backward: that recomputation is what a torch user pays on this path too.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from kernelzoo_plugins._flash.spec import NEG_INF, additive_mask, aligned, flash_applies, sdpa_mask

from kernelzoo.registry import FLOATS, Call, Implementation

from . import trivial_backward


class AttentionBackwardTorch(Implementation):
    op = "attention_backward"
    plugin = "torch"
    dtypes = {"cpu": (torch.float32,), "cuda": FLOATS}

    def run(self, call: Call, config: dict) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        trivial = trivial_backward(call)
        if trivial is not None:
            return trivial
        q, k, v, o, do = (aligned(call.inputs[name]) for name in ("q", "k", "v", "o", "do"))
        lse, mask = call.inputs["lse"], call.inputs.get("attn_mask")
        causal, scale = call.params["causal"], call.params["scale"]
        if q.device.type == "cpu":
            # torch's CPU forward leaves lse = 0 on rows that attend no key, and its backward expects that
            bias = additive_mask(mask, q.dtype) if mask is not None else None
            return torch.ops.aten._scaled_dot_product_flash_attention_for_cpu_backward(
                do, q, k, v, o, lse.masked_fill(lse == NEG_INF, 0.0), 0.0, causal, attn_mask=bias, scale=scale)
        if flash_applies(call):
            rng_state = torch.empty(2, dtype=torch.uint64, device=q.device)
            unused = torch.empty((), dtype=torch.uint64, device=q.device)
            return torch.ops.aten._scaled_dot_product_flash_attention_backward(
                do, q, k, v, o, lse.contiguous(), None, None, q.shape[2], k.shape[2], 0.0, causal, rng_state, unused,
                scale=scale)
        return self._sdpa_autograd(q, k, v, do, mask, causal, scale)

    @staticmethod
    def _sdpa_autograd(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, do: torch.Tensor, mask: torch.Tensor | None,
                       causal: bool, scale: float) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        gqa = q.shape[1] != k.shape[1]
        sdpa, dead = (mask, None) if mask is None else sdpa_mask(mask, causal, q.shape[2], k.shape[2], q.dtype)
        if dead is not None:  # rows that attend no key: opened in the mask, their gradient cut here
            do = do.masked_fill(dead, 0.0)
        with torch.enable_grad():
            inputs = [t.detach().requires_grad_() for t in (q, k, v)]
            o = F.scaled_dot_product_attention(*inputs, attn_mask=sdpa, is_causal=causal and mask is None,
                                               scale=scale, enable_gqa=gqa)
            return torch.autograd.grad(o, inputs, do)  # type: ignore[return-value]
