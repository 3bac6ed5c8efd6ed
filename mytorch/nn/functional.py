"""The functional forms of the layers and the losses, as in torch.nn.functional."""

from __future__ import annotations

from typing import Any

import torch

import mytorch
from mytorch import functions as F
from mytorch.tensor import Tensor

_REDUCTIONS = ("mean", "sum", "none")


def linear(x: Tensor, weight: Tensor, bias: Tensor | None = None, activation: str | None = None) -> Tensor:
    """x·weightᵀ + bias, through ``activation`` ("relu", "gelu", "gelu_tanh" or None) fused into the GEMM's
    epilogue: the op linear, differentiated through linear_backward."""
    return F.Linear.apply(x, weight, bias, activation)


def conv2d(x: Tensor, weight: Tensor, bias: Tensor | None = None, stride: Any = 1, padding: Any = 0,
           dilation: Any = 1, groups: int = 1) -> Tensor:
    if groups != 1:
        raise ValueError(f"mytorch conv2d: groups must be 1 (the conv2d op's), got {groups}")
    return F.Conv2d.apply(x, weight, bias, stride, padding, dilation)


def max_pool2d(x: Tensor, kernel_size: Any, stride: Any = None, padding: Any = 0) -> Tensor:
    return F.MaxPool2d.apply(x, kernel_size, stride, padding)


def relu(x: Tensor) -> Tensor:
    return F.Relu.apply(x)


def gelu(x: Tensor, approximate: str = "none") -> Tensor:
    return F.Gelu.apply(x, approximate)


def tanh(x: Tensor) -> Tensor:
    return F.Tanh.apply(x)


def softmax(x: Tensor, dim: int) -> Tensor:
    return F.Softmax.apply(x, dim)


def layer_norm(x: Tensor, normalized_shape: Any, weight: Tensor | None = None, bias: Tensor | None = None,
               eps: float = 1e-5) -> Tensor:
    shape = (normalized_shape,) if isinstance(normalized_shape, int) else tuple(normalized_shape)
    return F.LayerNorm.apply(x, shape, weight, bias, eps)


def embedding(indices: Tensor, weight: Tensor, padding_idx: int | None = None) -> Tensor:
    return F.Embedding.apply(indices, weight, padding_idx)


def dropout(x: Tensor, p: float = 0.5, training: bool = True) -> Tensor:
    """Zero elements with probability p and scale the rest by 1/(1-p) (identity when not training)."""
    if not 0.0 <= p <= 1.0:
        raise ValueError(f"mytorch dropout: p must be in [0, 1], got {p}")
    if not training or p == 0.0:
        return x
    if p == 1.0:
        return x * 0.0
    seed = int(torch.randint(0, 2**62, (), generator=mytorch.generator()))
    return F.Dropout.apply(x, p, seed)


def scaled_dot_product_attention(q: Tensor, k: Tensor, v: Tensor, attn_mask: Tensor | None = None,
                                 is_causal: bool = False, scale: float | None = None) -> Tensor:
    """softmax(q·kᵀ·scale + mask)·v on the attention op (boolean masks: True = attend, as torch)."""
    return F.Attention.apply(q, k, v, attn_mask, is_causal, scale)


def cross_entropy(logits: Tensor, target: Tensor, reduction: str = "mean", ignore_index: int = -100,
                  label_smoothing: float = 0.0) -> Tensor:
    """Log-softmax and negative log-likelihood of class indices, fused in the cross_entropy op."""
    return F.CrossEntropy.apply(logits, target, reduction, ignore_index, label_smoothing)


def mse_loss(input: Tensor, target: Tensor, reduction: str = "mean") -> Tensor:
    if reduction not in _REDUCTIONS:
        raise ValueError(f"mytorch mse_loss: reduction must be one of {_REDUCTIONS}, got {reduction!r}")
    if tuple(input.shape) != tuple(target.shape):
        raise ValueError(f"mytorch mse_loss: input {tuple(input.shape)} and target {tuple(target.shape)} must have "
                         f"one shape")
    squared = (input - target) ** 2
    return squared.mean() if reduction == "mean" else squared.sum() if reduction == "sum" else squared
