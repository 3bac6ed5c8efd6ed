"""torch's own attention, the baseline: the flash-attention kernels behind
torch.nn.functional.scaled_dot_product_attention, called through their aten ops because those
return the log-sum-exp too.

- CPU: ``aten._scaled_dot_product_flash_attention_for_cpu`` (masks, GQA and torch's causal).
- CUDA, float16/bfloat16 without a mask: ``aten._scaled_dot_product_flash_attention`` (FlashAttention-2;
  its causal mask is top-left only when Nq = Nk, and it needs head dims that are multiples of 8).
- Otherwise: ``scaled_dot_product_attention`` (it picks its best backend: memory-efficient for
  masks) with lse computed separately in tensor ops, which costs one more pass over the scores.

torch's attention has no 8-bit float path: FP8 calls are dequantized (q·q_descale, ... computed in float32)
and rounded to float16 on a GPU (float32 on the CPU), then run as above, o in out_dtype. That makes this
plugin the baseline an FP8 kernel is measured against, a 16-bit attention plus the dequantizing pass. (Rounded
to bfloat16, the dequantized inputs carried errors past the op's tolerance on an H200.)
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from kernelzoo_plugins._flash.fp8 import is_fp8, output_dtype, trivial_output, upcast
from kernelzoo_plugins._flash.spec import (
    NEG_INF,
    additive_mask,
    aligned,
    dead_rows,
    flash_applies,
    log_sum_exp,
    sdpa_mask,
)

from kernelzoo.registry import FLOATS, FP8, Call, Implementation


class AttentionTorch(Implementation):
    op = "attention"
    plugin = "torch"
    dtypes = {"cpu": (torch.float32, *FP8), "cuda": FLOATS + FP8}

    def run(self, call: Call, config: dict) -> tuple[torch.Tensor, torch.Tensor]:
        trivial = trivial_output(call)
        if trivial is not None:
            return trivial
        if is_fp8(call):
            out = output_dtype(call)
            o, lse = self.run(upcast(call, torch.float16 if call.device.type == "cuda" else torch.float32), config)
            return o.to(out), lse
        q, k, v = (aligned(call.inputs[name]) for name in ("q", "k", "v"))
        mask, causal, scale = call.inputs.get("attn_mask"), call.params["causal"], call.params["scale"]
        if q.device.type == "cpu":
            bias = additive_mask(mask, q.dtype) if mask is not None else None
            o, lse = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(
                q, k, v, 0.0, causal, attn_mask=bias, scale=scale)
        elif flash_applies(call):
            out = torch.ops.aten._scaled_dot_product_flash_attention(q, k, v, 0.0, causal, False, scale=scale)
            o, lse = out[0], out[1][..., :q.shape[2]]
        else:
            return self._sdpa(q, k, v, mask, causal, scale)
        dead = dead_rows(mask, causal, q.shape[2], k.shape[2])
        if dead is not None:  # torch's CPU kernel gives o = 0 there, but lse = 0
            o, lse = o.masked_fill(dead, 0.0), lse.masked_fill(dead.squeeze(-1), NEG_INF)
        return o, lse.float()

    @staticmethod
    def _sdpa(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None, causal: bool,
              scale: float) -> tuple[torch.Tensor, torch.Tensor]:
        gqa = q.shape[1] != k.shape[1]
        lse = log_sum_exp(q, k, mask, causal, scale, torch.float32)
        if mask is None:
            return F.scaled_dot_product_attention(q, k, v, is_causal=causal, scale=scale, enable_gqa=gqa), lse
        sdpa, dead = sdpa_mask(mask, causal, q.shape[2], k.shape[2], q.dtype)
        o = F.scaled_dot_product_attention(q, k, v, attn_mask=sdpa, scale=scale, enable_gqa=gqa)
        return o.masked_fill(dead, 0.0), lse
