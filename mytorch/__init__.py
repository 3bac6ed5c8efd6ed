"""mytorch: a small autograd framework whose every forward and backward runs on kernelzoo ops.

    import mytorch
    x = mytorch.randn(64, 784, requires_grad=True)
    loss = (x @ w).relu().sum()
    loss.backward()
    with mytorch.trace():   # which op ran on which plugin, and how long
        ...

Tensors keep their data in torch tensors (CPU or CUDA) used as memory only; the graph, the
backward pass and every computation are mytorch's, each computation a kernelzoo op, so the
winner of the tuning database for the call's device, dtype and shape runs.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from mytorch.autograd import Context, Function, is_grad_enabled, no_grad, set_grad_enabled
from mytorch.serialization import load, save
from mytorch.tensor import Tensor
from mytorch.trace import trace

float32, float16, bfloat16, float64 = torch.float32, torch.float16, torch.bfloat16, torch.float64
int64, int32, long = torch.int64, torch.int32, torch.int64

_generator = torch.Generator().manual_seed(0)


def manual_seed(seed: int) -> None:
    """Seed mytorch's random numbers (randn, rand, parameter initialisation, dropout masks)."""
    _generator.manual_seed(seed)


def generator() -> torch.Generator:
    """The CPU generator behind mytorch's random numbers."""
    return _generator


def _size(shape: tuple) -> tuple[int, ...]:
    return tuple(shape[0]) if len(shape) == 1 and isinstance(shape[0], (tuple, list, torch.Size)) else tuple(shape)


def _wrap(data: torch.Tensor, device: Any, requires_grad: bool) -> Tensor:
    if device is not None:
        data = data.to(device)
    return Tensor(data, requires_grad=requires_grad)


def tensor(data: Any, dtype: torch.dtype | None = None, device: Any = None, requires_grad: bool = False) -> Tensor:
    """A new tensor from Python numbers, nested lists or a NumPy array (float data → float32)."""
    data = data.data if isinstance(data, Tensor) else data
    t = torch.as_tensor(data, dtype=dtype).clone()
    if dtype is None and t.is_floating_point():
        t = t.to(torch.float32)
    return _wrap(t, device, requires_grad)


def from_torch(t: torch.Tensor, requires_grad: bool = False) -> Tensor:
    """A mytorch tensor on ``t``'s memory (no copy)."""
    return Tensor(t.detach(), requires_grad=requires_grad)


def from_numpy(array: Any) -> Tensor:
    return Tensor(torch.from_numpy(array))


def zeros(*shape: Any, dtype: torch.dtype = torch.float32, device: Any = None, requires_grad: bool = False) -> Tensor:
    return _wrap(torch.zeros(_size(shape), dtype=dtype), device, requires_grad)


def ones(*shape: Any, dtype: torch.dtype = torch.float32, device: Any = None, requires_grad: bool = False) -> Tensor:
    return _wrap(torch.ones(_size(shape), dtype=dtype), device, requires_grad)


def full(shape: Sequence[int], value: float, dtype: torch.dtype = torch.float32, device: Any = None,
         requires_grad: bool = False) -> Tensor:
    return _wrap(torch.full(tuple(shape), value, dtype=dtype), device, requires_grad)


def randn(*shape: Any, dtype: torch.dtype = torch.float32, device: Any = None, requires_grad: bool = False) -> Tensor:
    return _wrap(torch.randn(_size(shape), generator=_generator).to(dtype), device, requires_grad)


def rand(*shape: Any, dtype: torch.dtype = torch.float32, device: Any = None, requires_grad: bool = False) -> Tensor:
    return _wrap(torch.rand(_size(shape), generator=_generator).to(dtype), device, requires_grad)


def randint(low: int, high: int, shape: Sequence[int], device: Any = None) -> Tensor:
    return _wrap(torch.randint(low, high, tuple(shape), generator=_generator), device, False)


def arange(*args: Any, dtype: torch.dtype | None = None, device: Any = None, requires_grad: bool = False) -> Tensor:
    return _wrap(torch.arange(*args, dtype=dtype), device, requires_grad)


from mytorch import cuda, nn, optim  # noqa: E402  (they use the names above)

__all__ = [
    "Context", "Function", "Tensor", "arange", "bfloat16", "cuda", "float16", "float32", "float64", "from_numpy",
    "from_torch", "full", "generator", "int32", "int64", "is_grad_enabled", "load", "long", "manual_seed", "nn",
    "no_grad", "ones", "optim", "rand", "randint", "randn", "save", "set_grad_enabled", "tensor", "trace", "zeros",
]
