"""torch's own attention backward, the baseline, matching the torch plugin of the forward:

- CPU: ``aten._scaled_dot_product_flash_attention_for_cpu_backward``.
- CUDA, float16/bfloat16 without a mask: ``aten._scaled_dot_product_flash_attention_backward``
  (FlashAttention-2's backward; it reads the forward's random-number state only for dropout).
- Otherwise (float32, a mask, a head dim flash does not take): the textbook backward in tensor ops, the scores
  recomputed in float32 chunk by chunk (:func:`attention_backward_math`), as torch's math backend of
  ``scaled_dot_product_attention`` does. Not torch.autograd through that function: inside
  ``torch.ops.kernelzoo.attention_backward`` (torch.compile, opcheck) the op runs below autograd, where no graph
  is recorded to differentiate.
"""

from __future__ import annotations

import torch
from kernelzoo_plugins._flash.spec import NEG_INF, additive_mask, aligned, attention_backward_math, flash_applies

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
        return self.math(q, k, v, o, do, mask, causal, scale)

    @staticmethod
    def math(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, o: torch.Tensor, do: torch.Tensor,
             mask: torch.Tensor | None, causal: bool, scale: float) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(dq, dk, dv) in q's dtype, computed in float32 without autograd."""
        grads = attention_backward_math(q, k, v, do, mask, causal, scale, torch.float32, o=o)
        return tuple(g.to(q.dtype) for g in grads)  # type: ignore[return-value]
