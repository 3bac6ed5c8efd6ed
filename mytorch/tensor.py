"""Tensor: a torch tensor used as memory, plus what autograd needs (requires_grad, grad, the node
that made it). Every operation goes through a Function in :mod:`mytorch.functions`, whose forward
and backward are kernelzoo ops."""

from __future__ import annotations

import numbers
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from mytorch import autograd

Scalar = int | float


class Tensor:
    """An n-dimensional array on the CPU or a CUDA device, differentiable when ``requires_grad``."""

    __slots__ = ("__weakref__", "_node", "data", "grad", "requires_grad")
    __array_priority__ = 1000  # numpy defers to Tensor's reflected operators

    def __init__(self, data: torch.Tensor, requires_grad: bool = False, _node: Any = None) -> None:
        if not isinstance(data, torch.Tensor):
            raise TypeError(f"mytorch.Tensor wraps a torch.Tensor, got {type(data).__name__}; "
                            f"use mytorch.tensor(...) for Python data")
        if requires_grad and not (data.is_floating_point() or data.is_complex()):
            raise RuntimeError(f"mytorch: only floating-point tensors can require gradients, got {data.dtype}")
        self.data = data.detach() if data.requires_grad else data
        self.requires_grad = requires_grad
        self.grad: Tensor | None = None
        self._node = _node

    # --- what it is -----------------------------------------------------------------------------

    @property
    def shape(self) -> torch.Size:
        return self.data.shape

    @property
    def dtype(self) -> torch.dtype:
        return self.data.dtype

    @property
    def device(self) -> torch.device:
        return self.data.device

    @property
    def ndim(self) -> int:
        return self.data.dim()

    def dim(self) -> int:
        return self.data.dim()

    def size(self, dim: int | None = None) -> Any:
        return self.data.shape if dim is None else self.data.shape[dim]

    def numel(self) -> int:
        return self.data.numel()

    def stride(self) -> tuple[int, ...]:
        return self.data.stride()

    def is_contiguous(self) -> bool:
        return self.data.is_contiguous()

    @property
    def is_leaf(self) -> bool:
        return self._node is None

    @property
    def grad_fn(self) -> Any:
        return None if self._node is None else self._node[0]

    def __len__(self) -> int:
        if not self.shape:
            raise TypeError("len() of a 0-d tensor")
        return self.shape[0]

    def __repr__(self) -> str:
        body = repr(self.data)[len("tensor("):-1] if self.data.numel() else f"[], size={tuple(self.shape)}"
        extra = f", grad_fn={self.grad_fn!r}" if self._node is not None else (
            ", requires_grad=True" if self.requires_grad else "")
        return f"mytorch.tensor({body}{extra})"

    # --- leaving mytorch ------------------------------------------------------------------------

    def item(self) -> Scalar:
        return self.data.item()

    def tolist(self) -> Any:
        return self.data.tolist()

    def numpy(self) -> np.ndarray:
        if self.requires_grad:
            raise RuntimeError("mytorch: call .detach().numpy() on a tensor that requires grad")
        return self.data.cpu().numpy() if self.device.type != "cpu" else self.data.numpy()

    def torch(self) -> torch.Tensor:
        """The torch tensor behind this one (no copy; torch autograd is off on it)."""
        return self.data

    def __bool__(self) -> bool:
        return bool(self.data)

    def __float__(self) -> float:
        return float(self.data)

    def __int__(self) -> int:
        return int(self.data)

    # --- autograd -------------------------------------------------------------------------------

    def backward(self, gradient: Tensor | None = None, retain_graph: bool = False) -> None:
        """Accumulate d self / d leaf into every leaf's ``.grad`` (``gradient`` defaults to 1 for a
        one-element tensor)."""
        if not self.requires_grad:
            raise RuntimeError("mytorch: backward() on a tensor that does not require grad "
                               "(no input of its computation had requires_grad=True)")
        if gradient is None:
            if self.numel() != 1:
                raise RuntimeError(f"mytorch: backward() needs a gradient for a tensor of shape "
                                   f"{tuple(self.shape)}; only one-element outputs default to 1")
            grad = torch.ones_like(self.data)
        else:
            grad = gradient.data if isinstance(gradient, Tensor) else torch.as_tensor(gradient)
            if grad.shape != self.shape:
                raise RuntimeError(f"mytorch: gradient of shape {tuple(grad.shape)} for a tensor of "
                                   f"shape {tuple(self.shape)}")
        autograd.backward(self, grad, retain_graph=retain_graph)

    def detach(self) -> Tensor:
        """The same memory, cut from the graph."""
        return Tensor(self.data)

    def requires_grad_(self, requires_grad: bool = True) -> Tensor:
        if self._node is not None and not requires_grad:
            raise RuntimeError("mytorch: only leaf tensors can stop requiring grad; use detach()")
        if requires_grad and not self.data.is_floating_point():
            raise RuntimeError(f"mytorch: only floating-point tensors can require gradients, got {self.dtype}")
        self.requires_grad = requires_grad
        return self

    # --- devices and dtypes ---------------------------------------------------------------------

    def to(self, device: Any = None, dtype: torch.dtype | None = None) -> Tensor:
        """A copy on ``device`` and/or in ``dtype`` (self when nothing changes); differentiable."""
        if isinstance(device, torch.dtype):
            device, dtype = None, device
        target_device = torch.device(device) if device is not None else self.device
        if target_device.type == "cuda" and target_device.index is None:
            target_device = torch.device("cuda", torch.cuda.current_device())
        if target_device == self.device and (dtype is None or dtype == self.dtype):
            return self
        return F.To.apply(self, target_device, dtype or self.dtype)

    def cpu(self) -> Tensor:
        return self.to("cpu")

    def cuda(self) -> Tensor:
        return self.to("cuda")

    def float(self) -> Tensor:
        return self.to(dtype=torch.float32)

    def half(self) -> Tensor:
        return self.to(dtype=torch.float16)

    # --- arithmetic (broadcasting, like torch) --------------------------------------------------

    def _other(self, other: Any) -> Tensor:
        if isinstance(other, Tensor):
            return other
        if isinstance(other, numbers.Real) and not isinstance(other, bool):
            return Tensor(torch.tensor(float(other), dtype=self.dtype, device=self.device))
        if isinstance(other, torch.Tensor):
            raise TypeError("mytorch: mixing a torch.Tensor into mytorch arithmetic; wrap it with "
                            "mytorch.from_torch() first")
        return NotImplemented

    def __add__(self, other: Any) -> Tensor:
        other = self._other(other)
        return NotImplemented if other is NotImplemented else F.Add.apply(self, other, 1.0)

    def __radd__(self, other: Any) -> Tensor:
        return self.__add__(other)

    def __sub__(self, other: Any) -> Tensor:
        other = self._other(other)
        return NotImplemented if other is NotImplemented else F.Add.apply(self, other, -1.0)

    def __rsub__(self, other: Any) -> Tensor:
        other = self._other(other)
        return NotImplemented if other is NotImplemented else F.Add.apply(other, self, -1.0)

    def __mul__(self, other: Any) -> Tensor:
        other = self._other(other)
        return NotImplemented if other is NotImplemented else F.Mul.apply(self, other)

    def __rmul__(self, other: Any) -> Tensor:
        return self.__mul__(other)

    def __truediv__(self, other: Any) -> Tensor:
        other = self._other(other)
        return NotImplemented if other is NotImplemented else F.Div.apply(self, other)

    def __rtruediv__(self, other: Any) -> Tensor:
        other = self._other(other)
        return NotImplemented if other is NotImplemented else F.Div.apply(other, self)

    def __neg__(self) -> Tensor:
        return F.Mul.apply(self, self._other(-1.0))

    def __pos__(self) -> Tensor:
        return self

    def __pow__(self, exponent: Any) -> Tensor:
        if isinstance(exponent, numbers.Real) and not isinstance(exponent, bool):
            return F.Pow.apply(self, float(exponent))
        return NotImplemented

    def __matmul__(self, other: Tensor) -> Tensor:
        if not isinstance(other, Tensor):
            return NotImplemented
        return F.MatMul.apply(self, other)

    def __rmatmul__(self, other: Tensor) -> Tensor:
        if not isinstance(other, Tensor):
            return NotImplemented
        return F.MatMul.apply(other, self)

    def matmul(self, other: Tensor) -> Tensor:
        return self @ other

    def exp(self) -> Tensor:
        return F.Exp.apply(self)

    def log(self) -> Tensor:
        return F.Log.apply(self)

    def tanh(self) -> Tensor:
        return F.Tanh.apply(self)

    def sqrt(self) -> Tensor:
        return F.Pow.apply(self, 0.5)

    def relu(self) -> Tensor:
        return F.Relu.apply(self)

    def gelu(self, approximate: str = "none") -> Tensor:
        return F.Gelu.apply(self, approximate)

    def softmax(self, dim: int) -> Tensor:
        return F.Softmax.apply(self, dim)

    # --- reductions -----------------------------------------------------------------------------

    def sum(self, dim: int | Sequence[int] | None = None, keepdim: bool = False) -> Tensor:
        return F.Sum.apply(self, _dims(dim), keepdim)

    def mean(self, dim: int | Sequence[int] | None = None, keepdim: bool = False) -> Tensor:
        return F.Mean.apply(self, _dims(dim), keepdim)

    def max(self, dim: int | None = None, keepdim: bool = False) -> Any:
        """The largest element (dim=None), or ``(values, indices)`` along ``dim`` as torch.max."""
        values, indices = F.Max.apply(self, dim, keepdim)
        return values if dim is None else MaxResult(values, indices)

    def argmax(self, dim: int | None = None, keepdim: bool = False) -> Tensor:
        return F.Max.apply(self, dim, keepdim)[1]

    # --- views and layout (as torch defines them) -----------------------------------------------

    def view(self, *shape: Any) -> Tensor:
        return F.View.apply(self, _shape(shape))

    def reshape(self, *shape: Any) -> Tensor:
        shape = _shape(shape)
        try:
            return F.View.apply(self, shape)
        except RuntimeError:  # strides that no view can express: copy first, as torch.reshape does
            return F.View.apply(self.contiguous(), shape)

    def flatten(self, start_dim: int = 0, end_dim: int = -1) -> Tensor:
        if self.ndim == 0:
            return self.reshape(1)
        start, end = start_dim % self.ndim, end_dim % self.ndim
        shape = (*self.shape[:start], -1, *self.shape[end + 1:])
        return self.reshape(shape)

    def transpose(self, dim0: int, dim1: int) -> Tensor:
        order = list(range(self.ndim))
        order[dim0], order[dim1] = order[dim1], order[dim0]
        return F.Permute.apply(self, tuple(order))

    def permute(self, *dims: Any) -> Tensor:
        return F.Permute.apply(self, _shape(dims))

    @property
    def T(self) -> Tensor:
        return self.permute(*reversed(range(self.ndim)))

    def unsqueeze(self, dim: int) -> Tensor:
        return F.View.apply(self, tuple(self.data.unsqueeze(dim).shape))

    def squeeze(self, dim: int | None = None) -> Tensor:
        shape = self.data.squeeze() if dim is None else self.data.squeeze(dim)
        return F.View.apply(self, tuple(shape.shape))

    def expand(self, *shape: Any) -> Tensor:
        return F.Expand.apply(self, _shape(shape))

    def contiguous(self) -> Tensor:
        return self if self.is_contiguous() else F.Contiguous.apply(self)

    def unbind(self, dim: int = 0) -> tuple[Tensor, ...]:
        return F.Unbind.apply(self, dim)

    def __getitem__(self, index: Any) -> Tensor:
        return F.Index.apply(self, index)


class MaxResult(tuple):
    """torch.max(x, dim)'s pair, with its names."""

    def __new__(cls, values: Tensor, indices: Tensor) -> MaxResult:
        return super().__new__(cls, (values, indices))

    @property
    def values(self) -> Tensor:
        return self[0]

    @property
    def indices(self) -> Tensor:
        return self[1]


def _shape(args: tuple) -> tuple[int, ...]:
    """``view(2, 3)`` and ``view((2, 3))`` alike."""
    if len(args) == 1 and isinstance(args[0], (tuple, list, torch.Size)):
        return tuple(args[0])
    return tuple(args)


def _dims(dim: int | Sequence[int] | None) -> tuple[int, ...] | None:
    if dim is None:
        return None
    return (dim,) if isinstance(dim, int) else tuple(dim)


autograd.Tensor = Tensor
from mytorch import functions as F  # noqa: E402  (functions use Tensor)
