"""torch.nn modules whose kernels are kernelzoo ops.

``MultiheadAttention`` is a drop-in for ``torch.nn.MultiheadAttention``: the same constructor,
parameter names (so ``state_dict`` goes both ways), forward signature and semantics, with the
attention itself run by ``kernelzoo.ops.attention`` (forward and backward) when the weights are
not asked for.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor
from torch.nn.modules.linear import NonDynamicallyQuantizableLinear

from kernelzoo import ops
from kernelzoo.errors import ArgumentError, DTypeError

__all__ = ["MultiheadAttention"]


def _additive(mask: Tensor | None, name: str, dtype: torch.dtype) -> Tensor | None:
    """torch's MultiheadAttention masks as added to the scores: bool True (= do not attend) → -inf."""
    if mask is None:
        return None
    if mask.dtype == torch.bool:
        return torch.zeros(mask.shape, dtype=dtype, device=mask.device).masked_fill_(mask, float("-inf"))
    if not torch.is_floating_point(mask):
        raise DTypeError(f"MultiheadAttention: {name} must be bool or floating point, got {mask.dtype}")
    return mask.to(dtype)


def _batch_first(query: Tensor, key: Tensor, value: Tensor, batched: bool,
                 batch_first: bool) -> tuple[Tensor, Tensor, Tensor]:
    """The inputs as (B, L, E) views (unbatched ones a batch of one), keeping which of them are the
    same tensor: self-attention then projects once."""
    def convert(x: Tensor) -> Tensor:
        if not batched:
            return x.unsqueeze(0)
        return x if batch_first else x.transpose(0, 1)
    q = convert(query)
    k = q if key is query else convert(key)
    v = k if value is key else (q if value is query else convert(value))
    return q, k, v


def _check_shapes(query: Tensor, key: Tensor, value: Tensor, key_padding_mask: Tensor | None,
                  attn_mask: Tensor | None, num_heads: int) -> bool:
    """torch's rules for batched (3-D) and unbatched (2-D) inputs; whether the call is batched."""
    if query.dim() not in (2, 3):
        raise ArgumentError(f"MultiheadAttention: query must be 2-D (unbatched) or 3-D (batched), got "
                            f"{query.dim()}-D")
    batched = query.dim() == 3
    for name, t in (("key", key), ("value", value)):
        if t.dim() != query.dim():
            raise ArgumentError(f"MultiheadAttention: query is {query.dim()}-D, so {name} must be too, got "
                                f"{t.dim()}-D")
    if key_padding_mask is not None and key_padding_mask.dim() != query.dim() - 1:
        raise ArgumentError(f"MultiheadAttention: key_padding_mask must be {query.dim() - 1}-D for "
                            f"{query.dim()}-D query, got {key_padding_mask.dim()}-D")
    if attn_mask is not None:
        if attn_mask.dim() not in (2, 3):
            raise ArgumentError(f"MultiheadAttention: attn_mask must be 2-D or 3-D, got {attn_mask.dim()}-D")
        if not batched and attn_mask.dim() == 3 and attn_mask.shape[0] != num_heads:
            raise ArgumentError(f"MultiheadAttention: a 3-D attn_mask of unbatched inputs must be (num_heads, "
                                f"L, S) with num_heads = {num_heads}, got {tuple(attn_mask.shape)}")
    return batched


class MultiheadAttention(torch.nn.Module):
    """torch.nn.MultiheadAttention with its attention on ``kernelzoo.ops.attention``.

    need_weights=False runs the kernelzoo op; need_weights=True computes the weights explicitly
    (softmax of the scores), as torch does, and so does training with dropout > 0: the op has no
    dropout, and the explicit path applies it to the weights exactly as torch's does (the same
    random numbers for the same seed). One difference from torch: a query whose keys are all
    masked gets zero weights and output (the op's rule) where torch's weights are NaN.
    """

    __constants__ = ["batch_first"]

    def __init__(self, embed_dim: int, num_heads: int, dropout: float = 0.0, bias: bool = True,
                 add_bias_kv: bool = False, add_zero_attn: bool = False, kdim: int | None = None,
                 vdim: int | None = None, batch_first: bool = False, device: torch.device | str | None = None,
                 dtype: torch.dtype | None = None) -> None:
        if embed_dim <= 0 or num_heads <= 0:
            raise ArgumentError(f"MultiheadAttention: embed_dim and num_heads must be greater than 0, got "
                                f"embed_dim={embed_dim} and num_heads={num_heads}")
        if embed_dim % num_heads:
            raise ArgumentError(f"MultiheadAttention: embed_dim {embed_dim} is not divisible by num_heads {num_heads}")
        factory = {"device": device, "dtype": dtype}
        super().__init__()
        self.embed_dim = embed_dim
        self.kdim = kdim if kdim is not None else embed_dim
        self.vdim = vdim if vdim is not None else embed_dim
        self._qkv_same_embed_dim = self.kdim == embed_dim and self.vdim == embed_dim
        self.num_heads = num_heads
        self.dropout = dropout
        self.batch_first = batch_first
        self.head_dim = embed_dim // num_heads
        if self._qkv_same_embed_dim:
            self.in_proj_weight = torch.nn.Parameter(torch.empty((3 * embed_dim, embed_dim), **factory))
            self.register_parameter("q_proj_weight", None)
            self.register_parameter("k_proj_weight", None)
            self.register_parameter("v_proj_weight", None)
        else:
            self.q_proj_weight = torch.nn.Parameter(torch.empty((embed_dim, embed_dim), **factory))
            self.k_proj_weight = torch.nn.Parameter(torch.empty((embed_dim, self.kdim), **factory))
            self.v_proj_weight = torch.nn.Parameter(torch.empty((embed_dim, self.vdim), **factory))
            self.register_parameter("in_proj_weight", None)
        if bias:
            self.in_proj_bias = torch.nn.Parameter(torch.empty(3 * embed_dim, **factory))
        else:
            self.register_parameter("in_proj_bias", None)
        self.out_proj = NonDynamicallyQuantizableLinear(embed_dim, embed_dim, bias=bias, **factory)
        if add_bias_kv:
            self.bias_k = torch.nn.Parameter(torch.empty((1, 1, embed_dim), **factory))
            self.bias_v = torch.nn.Parameter(torch.empty((1, 1, embed_dim), **factory))
        else:
            self.bias_k = self.bias_v = None
        self.add_zero_attn = add_zero_attn
        self._reset_parameters()

    def _reset_parameters(self) -> None:
        """torch's initialisation: Xavier-uniform projections, zero biases, Xavier-normal bias_k/v."""
        if self._qkv_same_embed_dim:
            torch.nn.init.xavier_uniform_(self.in_proj_weight)
        else:
            for weight in (self.q_proj_weight, self.k_proj_weight, self.v_proj_weight):
                torch.nn.init.xavier_uniform_(weight)
        if self.in_proj_bias is not None:
            torch.nn.init.constant_(self.in_proj_bias, 0.0)
            torch.nn.init.constant_(self.out_proj.bias, 0.0)
        if self.bias_k is not None:
            torch.nn.init.xavier_normal_(self.bias_k)
            torch.nn.init.xavier_normal_(self.bias_v)

    def _project(self, query: Tensor, key: Tensor, value: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """q, k, v projections of batch-first inputs, (B, L, E); one product for self-attention."""
        e = self.embed_dim
        b_q, b_k, b_v = self.in_proj_bias.chunk(3) if self.in_proj_bias is not None else (None, None, None)
        if not self._qkv_same_embed_dim:
            return (F.linear(query, self.q_proj_weight, b_q), F.linear(key, self.k_proj_weight, b_k),
                    F.linear(value, self.v_proj_weight, b_v))
        w = self.in_proj_weight
        if query is key and key is value:
            return F.linear(query, w, self.in_proj_bias).unflatten(-1, (3, e)).unbind(-2)
        if key is value:
            b_kv = self.in_proj_bias[e:] if self.in_proj_bias is not None else None
            return (F.linear(query, w[:e], b_q), *F.linear(key, w[e:], b_kv).unflatten(-1, (2, e)).unbind(-2))
        return F.linear(query, w[:e], b_q), F.linear(key, w[e:2 * e], b_k), F.linear(value, w[2 * e:], b_v)

    def forward(self, query: Tensor, key: Tensor, value: Tensor, key_padding_mask: Tensor | None = None,
                need_weights: bool = True, attn_mask: Tensor | None = None, average_attn_weights: bool = True,
                is_causal: bool = False) -> tuple[Tensor, Tensor | None]:
        batched = _check_shapes(query, key, value, key_padding_mask, attn_mask, self.num_heads)
        if query.shape[-1] != self.embed_dim:
            raise ArgumentError(f"MultiheadAttention: query's last dim is {query.shape[-1]}, expected embed_dim "
                                f"{self.embed_dim}")
        key_padding_mask = _additive(key_padding_mask, "key_padding_mask", query.dtype)
        if is_causal and attn_mask is None:
            raise ArgumentError("MultiheadAttention: is_causal is a hint that attn_mask is the causal mask; "
                                "it needs attn_mask (torch's generate_square_subsequent_mask makes one)")
        # torch's rule: the hint replaces the mask only when nothing else needs the mask
        causal = is_causal and key_padding_mask is None and not need_weights
        attn_mask = None if causal else _additive(attn_mask, "attn_mask", query.dtype)
        query, key, value = _batch_first(query, key, value, batched, self.batch_first)
        if not batched and key_padding_mask is not None:
            key_padding_mask = key_padding_mask.unsqueeze(0)
        batch, tgt_len, src_len = query.shape[0], query.shape[1], key.shape[1]
        q, k, v = self._project(query, key, value)
        mask = self._merged_mask(attn_mask, key_padding_mask, batch, tgt_len, src_len)
        if self.bias_k is not None:
            k = torch.cat([k, self.bias_k.expand(batch, 1, -1)], dim=1)
            v = torch.cat([v, self.bias_v.expand(batch, 1, -1)], dim=1)
            mask = F.pad(mask, (0, 1)) if mask is not None else None
        # (B, L, E) -> (B, H, L, head_dim): views in the (B, L, H, D) memory order the kernels read as is
        q, k, v = (x.unflatten(-1, (self.num_heads, self.head_dim)).transpose(1, 2) for x in (q, k, v))
        if self.add_zero_attn:
            zeros = torch.zeros((batch, self.num_heads, 1, self.head_dim), dtype=k.dtype, device=k.device)
            k, v = torch.cat([k, zeros], dim=2), torch.cat([v, zeros], dim=2)
            mask = F.pad(mask, (0, 1)) if mask is not None else None
        dropout = self.dropout if self.training else 0.0
        weights = None
        if need_weights or dropout > 0.0:
            out, weights = self._explicit(q, k, v, mask, dropout)
        else:
            out = ops.attention(q, k, v, causal=causal, attn_mask=mask)
        out = self.out_proj(out.transpose(1, 2).reshape(batch, tgt_len, self.embed_dim))
        if weights is not None and average_attn_weights:
            weights = weights.mean(dim=1)
        if not batched:
            return out.squeeze(0), (weights.squeeze(0) if weights is not None and need_weights else None)
        if not self.batch_first:
            out = out.transpose(0, 1)
        return out, weights if need_weights else None

    def _merged_mask(self, attn_mask: Tensor | None, key_padding_mask: Tensor | None, batch: int, tgt_len: int,
                     src_len: int) -> Tensor | None:
        """attn_mask ((L, S), or (B·H, L, S)) plus key_padding_mask ((B, S)) as one (B, H|1, L|1, S) tensor."""
        if attn_mask is not None:
            if attn_mask.dim() == 2:
                expected: tuple[int, ...] = (tgt_len, src_len)
            else:
                expected = (self.num_heads, tgt_len, src_len) if attn_mask.shape[0] == self.num_heads and \
                    batch == 1 else (batch * self.num_heads, tgt_len, src_len)
            if tuple(attn_mask.shape) != expected:
                raise ArgumentError(f"MultiheadAttention: attn_mask has shape {tuple(attn_mask.shape)}, expected "
                                    f"{expected}")
            attn_mask = attn_mask.view(1, 1, tgt_len, src_len) if attn_mask.dim() == 2 else \
                attn_mask.view(batch, self.num_heads, tgt_len, src_len)
        if key_padding_mask is not None:
            if tuple(key_padding_mask.shape) != (batch, src_len):
                raise ArgumentError(f"MultiheadAttention: key_padding_mask has shape "
                                    f"{tuple(key_padding_mask.shape)}, expected {(batch, src_len)}")
            key_padding_mask = key_padding_mask.view(batch, 1, 1, src_len)
            return key_padding_mask if attn_mask is None else attn_mask + key_padding_mask
        return attn_mask

    def _explicit(self, q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None,
                  dropout: float) -> tuple[Tensor, Tensor]:
        """softmax(q·kᵀ/sqrt(D) + mask) with dropout, as torch computes it; (output, weights)."""
        scores = (q * math.sqrt(1.0 / self.head_dim)) @ k.transpose(-2, -1)
        if mask is not None:
            scores = scores + mask
        weights = torch.softmax(scores, dim=-1)
        weights = torch.where(torch.isnan(weights), torch.zeros((), dtype=weights.dtype, device=weights.device),
                              weights)  # rows whose keys are all masked
        if dropout > 0.0:
            weights = F.dropout(weights, p=dropout)
        return weights @ v, weights
