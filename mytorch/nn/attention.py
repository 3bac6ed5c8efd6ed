"""MultiheadAttention with torch.nn.MultiheadAttention's constructor, parameter names (its
state_dict loads from torch's module) and forward signature, on the attention op."""

from __future__ import annotations

import math
from typing import Any

import torch

import mytorch
from kernelzoo import ops
from mytorch import functions as Functions
from mytorch.nn import functional as F
from mytorch.nn.layers import Linear
from mytorch.nn.module import Module, Parameter
from mytorch.tensor import Tensor


def _additive(mask: Tensor | torch.Tensor | None, dtype: torch.dtype) -> torch.Tensor | None:
    """torch's MultiheadAttention mask convention (bool True = do not attend, or float added to the
    scores) as an additive float mask. Masks are inputs, never differentiated: this conversion is
    preprocessing on the mask's memory."""
    if mask is None:
        return None
    mask = mask.data if isinstance(mask, Tensor) else mask
    if mask.dtype == torch.bool:
        return torch.zeros(mask.shape, dtype=dtype, device=mask.device).masked_fill_(mask, float("-inf"))
    return mask.to(dtype)


class MultiheadAttention(Module):
    """Multi-head attention as torch.nn.MultiheadAttention (add_bias_kv and add_zero_attn are not
    supported). need_weights=False runs the attention op (forward and backward); need_weights=True
    or dropout > 0 in training computes the weights explicitly (matmul, softmax, dropout ops)."""

    def __init__(self, embed_dim: int, num_heads: int, dropout: float = 0.0, bias: bool = True,
                 add_bias_kv: bool = False, add_zero_attn: bool = False, kdim: int | None = None,
                 vdim: int | None = None, batch_first: bool = False, device: Any = None,
                 dtype: torch.dtype | None = None) -> None:
        super().__init__()
        if embed_dim <= 0 or num_heads <= 0 or embed_dim % num_heads:
            raise ValueError(f"MultiheadAttention: embed_dim ({embed_dim}) must be a positive multiple of "
                             f"num_heads ({num_heads})")
        if add_bias_kv or add_zero_attn:
            raise ValueError("mytorch MultiheadAttention: add_bias_kv and add_zero_attn are not supported")
        self.embed_dim, self.num_heads, self.head_dim = embed_dim, num_heads, embed_dim // num_heads
        self.kdim, self.vdim = kdim or embed_dim, vdim or embed_dim
        self.dropout, self.batch_first = dropout, batch_first
        self._qkv_same_embed_dim = self.kdim == embed_dim and self.vdim == embed_dim
        factory = {"device": device, "dtype": dtype or torch.float32}

        def xavier(rows: int, cols: int, fan_out: int) -> Parameter:
            bound = math.sqrt(6.0 / (cols + fan_out))
            data = (torch.rand((rows, cols), generator=mytorch.generator()) * 2 - 1) * bound
            return Parameter(data.to(**factory))

        if self._qkv_same_embed_dim:
            self.in_proj_weight = xavier(3 * embed_dim, embed_dim, 3 * embed_dim)
        else:
            self.q_proj_weight = xavier(embed_dim, embed_dim, embed_dim)
            self.k_proj_weight = xavier(embed_dim, self.kdim, embed_dim)
            self.v_proj_weight = xavier(embed_dim, self.vdim, embed_dim)
        if bias:
            self.in_proj_bias = Parameter(torch.zeros(3 * embed_dim, **factory))
        else:
            self.register_parameter("in_proj_bias", None)
        self.out_proj = Linear(embed_dim, embed_dim, bias=bias, device=device, dtype=dtype)
        if bias:
            self.out_proj.bias.data.zero_()

    def _project(self, query: Tensor, key: Tensor, value: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        e, b = self.embed_dim, self.in_proj_bias
        biases = (None, None, None) if b is None else (b[:e], b[e:2 * e], b[2 * e:])
        if not self._qkv_same_embed_dim:
            weights = (self.q_proj_weight, self.k_proj_weight, self.v_proj_weight)
            return tuple(F.linear(x, w, bias) for x, w, bias in zip((query, key, value), weights, biases))
        w = self.in_proj_weight
        return (F.linear(query, w[:e], biases[0]), F.linear(key, w[e:2 * e], biases[1]),
                F.linear(value, w[2 * e:], biases[2]))

    def forward(self, query: Tensor, key: Tensor, value: Tensor, key_padding_mask: Any = None,
                need_weights: bool = True, attn_mask: Any = None, average_attn_weights: bool = True,
                is_causal: bool = False) -> tuple[Tensor, Tensor | None]:
        if query.ndim not in (2, 3) or key.ndim != query.ndim or value.ndim != query.ndim:
            raise ValueError(f"MultiheadAttention: query, key and value must all be 3-D (batched) or 2-D, got "
                             f"{query.ndim}-D, {key.ndim}-D, {value.ndim}-D")
        if is_causal and attn_mask is None:
            raise ValueError("MultiheadAttention: is_causal is a hint that attn_mask is the causal mask; it "
                             "needs attn_mask")
        batched = query.ndim == 3

        def batch_first(x: Tensor) -> Tensor:
            return x.unsqueeze(0) if not batched else (x if self.batch_first else x.transpose(0, 1))
        q_in = batch_first(query)
        k_in = q_in if key is query else batch_first(key)
        v_in = k_in if value is key else (q_in if value is query else batch_first(value))
        h, d = self.num_heads, self.head_dim
        batch, tgt_len, src_len = q_in.shape[0], q_in.shape[1], k_in.shape[1]
        if self._qkv_same_embed_dim and q_in is k_in and k_in is v_in:
            # self-attention: one product, whose (B, L, 3, H, D) layout gives q, k and v as views
            q, k, v = Functions.SplitHeads.apply(F.linear(q_in, self.in_proj_weight, self.in_proj_bias), h)
        else:
            q, k, v = (x.reshape(batch, x.shape[1], h, d).transpose(1, 2)
                       for x in self._project(q_in, k_in, v_in))
        causal = is_causal and key_padding_mask is None and not need_weights
        mask = self._mask(None if causal else attn_mask, key_padding_mask, batch, tgt_len, src_len, q.dtype)
        dropout = self.dropout if self.training else 0.0
        weights = None
        if need_weights or dropout > 0.0:
            scores = (q * (1.0 / math.sqrt(d))) @ k.transpose(-2, -1)
            if mask is not None:
                scores = scores + mask
            weights = F.dropout(F.softmax(scores, -1), dropout, True) if dropout > 0 else F.softmax(scores, -1)
            out = weights @ v
        else:
            out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=causal)
        out = self.out_proj(Functions.MergeHeads.apply(out))
        if weights is not None and average_attn_weights:
            weights = weights.mean(dim=1)
        if not batched:
            out = out.squeeze(0)
            weights = weights.squeeze(0) if weights is not None else None
        elif not self.batch_first:
            out = out.transpose(0, 1)
        return out, weights if need_weights else None

    def _mask(self, attn_mask: Any, key_padding_mask: Any, batch: int, tgt_len: int, src_len: int,
              dtype: torch.dtype) -> Tensor | None:
        """attn_mask ((L, S) or (B·H, L, S)) and key_padding_mask ((B, S)) as one additive
        (B, H|1, L|1, S) mask."""
        merged = None
        attn = _additive(attn_mask, dtype)
        if attn is not None:
            if tuple(attn.shape) == (tgt_len, src_len):
                merged = attn.view(1, 1, tgt_len, src_len)
            elif tuple(attn.shape) == (batch * self.num_heads, tgt_len, src_len):
                merged = attn.view(batch, self.num_heads, tgt_len, src_len)
            else:
                raise ValueError(f"MultiheadAttention: attn_mask has shape {tuple(attn.shape)}, expected "
                                 f"{(tgt_len, src_len)} or {(batch * self.num_heads, tgt_len, src_len)}")
        padding = _additive(key_padding_mask, dtype)
        if padding is not None:
            if padding.dim() == 1:
                padding = padding.unsqueeze(0)
            if tuple(padding.shape) != (batch, src_len):
                raise ValueError(f"MultiheadAttention: key_padding_mask has shape {tuple(padding.shape)}, "
                                 f"expected {(batch, src_len)}")
            padding = padding.view(batch, 1, 1, src_len)
            merged = padding if merged is None else ops.add(merged, padding)
        return None if merged is None else mytorch.from_torch(merged)
