"""Layers, with torch.nn's constructors, parameter names and initialisation."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import torch

import mytorch
from mytorch.nn import functional as F
from mytorch.nn.module import Module, Parameter
from mytorch.tensor import Tensor


def _uniform(shape: Sequence[int], bound: float, device: Any, dtype: torch.dtype | None) -> Parameter:
    """U(-bound, bound) from mytorch's generator (torch's default init for Linear and Conv2d weights
    and biases: Kaiming-uniform with a = √5 comes to bound = 1/√fan_in)."""
    data = (torch.rand(tuple(shape), generator=mytorch.generator()) * 2 - 1) * bound
    return Parameter(data.to(device=device, dtype=dtype or torch.float32))


class Linear(Module):
    """torch.nn.Linear's layer; ``activation`` ("relu", "gelu", "gelu_tanh") is applied to its output in the
    GEMM's epilogue, as Linear followed by ReLU or GELU would be (gelu_tanh: GELU(approximate="tanh"))."""

    def __init__(self, in_features: int, out_features: int, bias: bool = True, device: Any = None,
                 dtype: torch.dtype | None = None, activation: str | None = None) -> None:
        super().__init__()
        self.in_features, self.out_features, self.activation = in_features, out_features, activation
        bound = 1.0 / math.sqrt(in_features) if in_features else 0.0
        self.weight = _uniform((out_features, in_features), bound, device, dtype)
        if bias:
            self.bias = _uniform((out_features,), bound, device, dtype)
        else:
            self.register_parameter("bias", None)

    def forward(self, x: Tensor) -> Tensor:
        return F.linear(x, self.weight, self.bias, self.activation)

    def extra_repr(self) -> str:
        text = f"in_features={self.in_features}, out_features={self.out_features}, bias={self.bias is not None}"
        return text + (f", activation={self.activation!r}" if self.activation is not None else "")


class Conv2d(Module):
    """NCHW convolution, groups=1."""

    def __init__(self, in_channels: int, out_channels: int, kernel_size: Any, stride: Any = 1, padding: Any = 0,
                 dilation: Any = 1, groups: int = 1, bias: bool = True, device: Any = None,
                 dtype: torch.dtype | None = None) -> None:
        super().__init__()
        if groups != 1:
            raise ValueError(f"mytorch Conv2d: groups must be 1, got {groups}")
        kh, kw = (kernel_size, kernel_size) if isinstance(kernel_size, int) else tuple(kernel_size)
        self.in_channels, self.out_channels, self.kernel_size = in_channels, out_channels, (kh, kw)
        self.stride, self.padding, self.dilation = stride, padding, dilation
        bound = 1.0 / math.sqrt(in_channels * kh * kw)
        self.weight = _uniform((out_channels, in_channels, kh, kw), bound, device, dtype)
        if bias:
            self.bias = _uniform((out_channels,), bound, device, dtype)
        else:
            self.register_parameter("bias", None)

    def forward(self, x: Tensor) -> Tensor:
        return F.conv2d(x, self.weight, self.bias, self.stride, self.padding, self.dilation)

    def extra_repr(self) -> str:
        return (f"{self.in_channels}, {self.out_channels}, kernel_size={self.kernel_size}, stride={self.stride}, "
                f"padding={self.padding}")


class MaxPool2d(Module):
    def __init__(self, kernel_size: Any, stride: Any = None, padding: Any = 0) -> None:
        super().__init__()
        self.kernel_size, self.stride, self.padding = kernel_size, stride, padding

    def forward(self, x: Tensor) -> Tensor:
        return F.max_pool2d(x, self.kernel_size, self.stride, self.padding)

    def extra_repr(self) -> str:
        return f"kernel_size={self.kernel_size}, stride={self.stride}, padding={self.padding}"


class ReLU(Module):
    def forward(self, x: Tensor) -> Tensor:
        return F.relu(x)


class GELU(Module):
    def __init__(self, approximate: str = "none") -> None:
        super().__init__()
        self.approximate = approximate

    def forward(self, x: Tensor) -> Tensor:
        return F.gelu(x, self.approximate)


class Tanh(Module):
    def forward(self, x: Tensor) -> Tensor:
        return F.tanh(x)


class Flatten(Module):
    def __init__(self, start_dim: int = 1, end_dim: int = -1) -> None:
        super().__init__()
        self.start_dim, self.end_dim = start_dim, end_dim

    def forward(self, x: Tensor) -> Tensor:
        return x.flatten(self.start_dim, self.end_dim)


class Dropout(Module):
    def __init__(self, p: float = 0.5) -> None:
        super().__init__()
        if not 0.0 <= p <= 1.0:
            raise ValueError(f"mytorch Dropout: p must be in [0, 1], got {p}")
        self.p = p

    def forward(self, x: Tensor) -> Tensor:
        return F.dropout(x, self.p, self.training)


class Sequential(Module):
    def __init__(self, *modules: Module) -> None:
        super().__init__()
        for i, module in enumerate(modules):
            setattr(self, str(i), module)

    def __getitem__(self, index: int) -> Module:
        return list(self._modules.values())[index]

    def __len__(self) -> int:
        return len(self._modules)

    def forward(self, x: Any) -> Any:
        for module in self._modules.values():
            x = module(x)
        return x


class ModuleList(Module):
    def __init__(self, modules: Sequence[Module] = ()) -> None:
        super().__init__()
        for i, module in enumerate(modules):
            setattr(self, str(i), module)

    def __getitem__(self, index: int) -> Module:
        return list(self._modules.values())[index]

    def __iter__(self) -> Any:
        return iter(self._modules.values())

    def __len__(self) -> int:
        return len(self._modules)


class LayerNorm(Module):
    def __init__(self, normalized_shape: Any, eps: float = 1e-5, elementwise_affine: bool = True, bias: bool = True,
                 device: Any = None, dtype: torch.dtype | None = None) -> None:
        super().__init__()
        shape = (normalized_shape,) if isinstance(normalized_shape, int) else tuple(normalized_shape)
        self.normalized_shape, self.eps = shape, eps
        factory = {"device": device, "dtype": dtype or torch.float32}
        if elementwise_affine:
            self.weight = Parameter(torch.ones(shape, **factory))
            if bias:
                self.bias = Parameter(torch.zeros(shape, **factory))
            else:
                self.register_parameter("bias", None)
        else:
            self.register_parameter("weight", None)
            self.register_parameter("bias", None)

    def forward(self, x: Tensor) -> Tensor:
        return F.layer_norm(x, self.normalized_shape, self.weight, self.bias, self.eps)

    def extra_repr(self) -> str:
        return f"{self.normalized_shape}, eps={self.eps}"


class Embedding(Module):
    def __init__(self, num_embeddings: int, embedding_dim: int, padding_idx: int | None = None, device: Any = None,
                 dtype: torch.dtype | None = None) -> None:
        super().__init__()
        self.num_embeddings, self.embedding_dim = num_embeddings, embedding_dim
        if padding_idx is not None and padding_idx < 0:
            padding_idx += num_embeddings
        self.padding_idx = padding_idx
        data = torch.randn((num_embeddings, embedding_dim), generator=mytorch.generator())
        if padding_idx is not None:
            data[padding_idx] = 0.0
        self.weight = Parameter(data.to(device=device, dtype=dtype or torch.float32))

    def forward(self, indices: Tensor) -> Tensor:
        return F.embedding(indices, self.weight, self.padding_idx)

    def extra_repr(self) -> str:
        return f"{self.num_embeddings}, {self.embedding_dim}"


class CrossEntropyLoss(Module):
    def __init__(self, reduction: str = "mean", ignore_index: int = -100, label_smoothing: float = 0.0) -> None:
        super().__init__()
        self.reduction, self.ignore_index, self.label_smoothing = reduction, ignore_index, label_smoothing

    def forward(self, logits: Tensor, target: Tensor) -> Tensor:
        return F.cross_entropy(logits, target, self.reduction, self.ignore_index, self.label_smoothing)


class MSELoss(Module):
    def __init__(self, reduction: str = "mean") -> None:
        super().__init__()
        self.reduction = reduction

    def forward(self, input: Tensor, target: Tensor) -> Tensor:
        return F.mse_loss(input, target, self.reduction)
