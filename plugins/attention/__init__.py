"""attention(q, k, v, *, causal=False, scale=None, attn_mask=None): scaled dot-product attention
with torch.nn.functional.scaled_dot_product_attention's semantics, the forward pass.

    o = softmax(q·kᵀ·scale + mask) · v        q (B, Hq, Nq, D); k, v (B, Hk, Nk, D); o like q

- Grouped-query attention: Hq is a multiple of Hk; query head h reads key/value head h // (Hq/Hk).
- causal: query i attends keys j ≤ i, torch's is_causal (the top-left aligned lower triangle) also
  when Nq ≠ Nk. FlashAttention's own causal flag aligns bottom-right instead; this op does not.
- scale defaults to 1/sqrt(D).
- attn_mask: boolean (True = attend) or additive float (bool, float32, float16 or bfloat16),
  broadcastable to (B, Hq, Nq, Nk); a key-padding mask (B, 1, 1, Nk) is the common case. It may be
  combined with causal (torch's SDPA refuses both; here both apply).
- A query row that attends no key at all gives o = 0 and lse = -inf, and gradients 0 through it:
  never NaN (torch's SDPA has given NaN there; its CPU kernels give 0 with lse = 0).
- NaN in what a row attends makes that row NaN. NaN in a key or value a row does not attend may
  or may not reach it (0·NaN in a full P·V product does, a skipped causal block does not), so the
  conformance cases hold no NaN; torch's own kernels differ the same way.

Every implementation returns (o, lse): lse[b, h, i] = log Σ_j exp(s_ij), the natural-log
log-sum-exp of row i's scaled, masked scores, float32 of shape (B, Hq, Nq), which the backward op
(attention_backward) needs. ``kernelzoo.ops.attention`` returns o only, and records a backward
through attention_backward when q, k or v requires grad.

Shapes for tuning and benchmarks are tuples (B, H, N, D, causal) with Nq = Nk = N, Hq = Hk = H
and causal 0 or 1: (4, 32, 4096, 128, 1) is "4x32x4096x128" with the flag "causal". ``example``
also takes ``kv_heads=``, ``n_k=``, ``causal=`` and ``scale=`` keywords for other calls.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from kernelzoo_plugins._flash.spec import (
    AttentionSpecBase,
    attention_math,
    bad_cases,
    case_specs,
    check_qkv_mask,
    compare,
    forward_case,
    lse_atol,
    output_atol,
)

from kernelzoo import ops
from kernelzoo.errors import ArgumentError
from kernelzoo.registry import BadCase, Call, Case, Derivative
from kernelzoo.tolerance import Mismatch


class Attention(AttentionSpecBase):
    """attention(q, k, v, *, causal=False, scale=None, attn_mask=None) -> o: softmax(q·kᵀ·scale + mask)·v
    with grouped-query heads, torch's top-left causal mask, and 0 for rows that attend no key."""

    name = "attention"
    outputs = 2  # o and the log-sum-exp
    # the derivative: attention_backward recomputes the probabilities from the saved log-sum-exp
    derivative = Derivative(
        inputs=("q", "k", "v"),
        save=lambda call, outputs: {**call.inputs, "attn_mask": call.inputs.get("attn_mask"), "o": outputs[0],
                                    "lse": outputs[1], "params": dict(call.params)},
        backward=lambda saved, grad: dict(zip(("q", "k", "v"), ops.attention_backward(
            saved["q"], saved["k"], saved["v"], saved["o"], saved["lse"], grad, attn_mask=saved["attn_mask"],
            **saved["params"]))),
    )

    def check(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, causal: bool = False,
              scale: float | None = None, attn_mask: torch.Tensor | None = None) -> Call:
        inputs, params = check_qkv_mask(self.name, q, k, v, causal, scale, attn_mask)
        return Call(self, inputs, params)

    def reference(self, call: Call) -> tuple[torch.Tensor, torch.Tensor]:
        i = call.inputs
        return attention_math(i["q"], i["k"], i["v"], i.get("attn_mask"), call.params["causal"],
                              call.params["scale"], torch.float64)

    def example(self, shape: Sequence[int], dtype: torch.dtype, device: torch.device | str,
                generator: torch.Generator | None = None, **params: Any) -> Call:
        args, kwargs = self.example_inputs(shape, dtype, device, generator, params)
        return self.check(*args, **kwargs)

    def flops(self, call: Call) -> float:
        return self.forward_flops(call)

    def bytes(self, call: Call) -> float:
        q, k = call.inputs["q"], call.inputs["k"]
        mask = call.inputs.get("attn_mask")
        n = 2 * q.numel() + 2 * k.numel()  # q, k, v read, o written
        return float(n * q.element_size() + 4 * q[..., 0].numel()
                     + (mask.numel() * mask.element_size() if mask is not None else 0))

    def verify(self, call: Call, outputs: Any, reference: Any) -> Mismatch | None:
        if not isinstance(outputs, tuple) or len(outputs) != 2:
            return Mismatch("expected the outputs (o, lse)")
        (o, lse), (o_ref, lse_ref) = outputs, reference
        for name, t, dtype in (("o", o, call.dtype), ("lse", lse, torch.float32)):
            if t.dtype != dtype or t.device != call.device:
                return Mismatch(f"{name} is {t.dtype} on {t.device}, expected {dtype} on {call.device}")
        i = call.inputs
        base_o, base_lse = attention_math(i["q"], i["k"], i["v"], i.get("attn_mask"), call.params["causal"],
                                          call.params["scale"], call.dtype)
        why = (compare("o", o, o_ref, base_o, output_atol(call.dtype, o_ref))
               or compare("lse", lse, lse_ref, base_lse, lse_atol(call.dtype)))
        return Mismatch(why) if why else None

    def cases(self) -> list[Case]:
        return [Case(case_id, forward_case(spec), small) for case_id, spec, small in case_specs()]

    def bad_cases(self) -> list[BadCase]:
        return bad_cases(self.name)

    # --- autograd ----------------------------------------------------------------------------
    def result(self, call: Call, outputs: Any) -> torch.Tensor:
        return outputs[0]

    def fake(self, call: Call) -> tuple[torch.Tensor, torch.Tensor]:
        """o (B, Hq, Nq, Dv) in q's dtype and the log-sum-exp (B, Hq, Nq) in float32 (the torch plugin aligns its
        inputs by their addresses, which fake tensors lack)."""
        q, v = call.inputs["q"], call.inputs["v"]
        return q.new_empty((*q.shape[:-1], v.shape[-1])), q.new_empty(q.shape[:-1], dtype=torch.float32)

    def needs_autograd(self, call: Call) -> bool:
        mask = call.inputs.get("attn_mask")
        if mask is not None and mask.requires_grad and torch.is_grad_enabled():
            raise ArgumentError("attention: attn_mask requires grad, but gradients with respect to the mask "
                                "are not computed; pass attn_mask.detach()")
        return super().needs_autograd(call)
