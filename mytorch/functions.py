"""mytorch's Functions: each forward and backward is one or a few kernelzoo ops, so whatever won
the tuning for the call's device, dtype and shape runs. torch appears only as memory: views
(metadata), allocation of outputs, and moves between devices."""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from typing import Any

import torch

from kernelzoo import dispatch, ops
from mytorch.autograd import Context, Function

run_op = dispatch.run_op  # all of an op's outputs (extras for the backward included)


# --- helpers: scalars, fills, broadcasting --------------------------------------------------------

@functools.lru_cache(maxsize=256)
def _scalar_cached(value: float, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    return torch.tensor(value, dtype=dtype, device=device)


def scalar(value: float, like: torch.Tensor) -> torch.Tensor:
    """A 0-d tensor of ``value`` in ``like``'s dtype and device (shared: never written to)."""
    return _scalar_cached(float(value), like.dtype, like.device)


def full(shape: Sequence[int], value: float, like: torch.Tensor) -> torch.Tensor:
    """A new contiguous tensor of ``shape`` filled with ``value`` by the copy_ op (a broadcast copy)."""
    return ops.copy_(torch.empty(tuple(shape), dtype=like.dtype, device=like.device), scalar(value, like))


def scale(t: torch.Tensor, factor: float) -> torch.Tensor:
    return t if factor == 1 else ops.mul(t, scalar(factor, t))


def materialize(t: torch.Tensor, shape: Sequence[int]) -> torch.Tensor:
    """``t`` broadcast to ``shape`` as a new contiguous tensor (copy_)."""
    return ops.copy_(torch.empty(tuple(shape), dtype=t.dtype, device=t.device), t)


def contiguous(t: torch.Tensor) -> torch.Tensor:
    return t if t.is_contiguous() else materialize(t, t.shape)


def unbroadcast(grad: torch.Tensor, shape: Sequence[int]) -> torch.Tensor:
    """Sum ``grad`` over the dimensions that broadcasting expanded, back to ``shape``."""
    shape = tuple(shape)
    if tuple(grad.shape) == shape:
        return grad
    lead = grad.dim() - len(shape)
    dims = list(range(lead)) + [lead + i for i, n in enumerate(shape) if n == 1 and grad.shape[lead + i] != 1]
    return ops.sum(grad, dim=dims, keepdim=True).reshape(shape)


def reshape(t: torch.Tensor, shape: Sequence[int]) -> torch.Tensor:
    """A view of ``t`` as ``shape``, through a contiguous copy where strides do not allow one."""
    try:
        return t.view(tuple(shape))
    except RuntimeError:
        return contiguous(t).view(tuple(shape))


# --- moves --------------------------------------------------------------------------------------

class To(Function):
    """A copy on another device or in another dtype (memory moves: torch's copy engine)."""

    @staticmethod
    def forward(ctx: Context, x: torch.Tensor, device: torch.device, dtype: torch.dtype) -> torch.Tensor:
        ctx.source = (x.device, x.dtype)
        return x.to(device=device, dtype=dtype, copy=True)

    @staticmethod
    def backward(ctx: Context, grad: torch.Tensor) -> tuple:
        device, dtype = ctx.source
        return grad.to(device=device, dtype=dtype), None, None


# --- arithmetic ---------------------------------------------------------------------------------

class Add(Function):
    """a + alpha·b (alpha = -1 is subtraction)."""

    @staticmethod
    def forward(ctx: Context, a: torch.Tensor, b: torch.Tensor, alpha: float) -> torch.Tensor:
        ctx.shapes, ctx.alpha = (a.shape, b.shape), alpha
        return ops.add(a, b, alpha=alpha)

    @staticmethod
    def backward(ctx: Context, grad: torch.Tensor) -> tuple:
        a_shape, b_shape = ctx.shapes
        grad_a = unbroadcast(grad, a_shape) if ctx.needs_input_grad[0] else None
        grad_b = unbroadcast(scale(grad, ctx.alpha), b_shape) if ctx.needs_input_grad[1] else None
        return grad_a, grad_b, None


class Mul(Function):
    @staticmethod
    def forward(ctx: Context, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        ctx.save_for_backward(a if ctx.needs_input_grad[1] else None, b if ctx.needs_input_grad[0] else None)
        ctx.shapes = (a.shape, b.shape)
        return ops.mul(a, b)

    @staticmethod
    def backward(ctx: Context, grad: torch.Tensor) -> tuple:
        a, b = ctx.saved_tensors
        a_shape, b_shape = ctx.shapes
        grad_a = unbroadcast(ops.mul(grad, b), a_shape) if ctx.needs_input_grad[0] else None
        grad_b = unbroadcast(ops.mul(grad, a), b_shape) if ctx.needs_input_grad[1] else None
        return grad_a, grad_b


class Div(Function):
    @staticmethod
    def forward(ctx: Context, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        out = ops.div(a, b)
        ctx.save_for_backward(b, out)
        ctx.shapes = (a.shape, b.shape)
        return out

    @staticmethod
    def backward(ctx: Context, grad: torch.Tensor) -> tuple:
        b, out = ctx.saved_tensors
        a_shape, b_shape = ctx.shapes
        grad_over_b = ops.div(grad, b)
        grad_a = unbroadcast(grad_over_b, a_shape) if ctx.needs_input_grad[0] else None
        # d(a/b)/db = -a/b² = -out/b
        grad_b = unbroadcast(scale(ops.mul(grad_over_b, out), -1.0), b_shape) if ctx.needs_input_grad[1] else None
        return grad_a, grad_b


class Pow(Function):
    """x ** exponent for a real exponent."""

    @staticmethod
    def forward(ctx: Context, x: torch.Tensor, exponent: float) -> torch.Tensor:
        ctx.save_for_backward(x)
        ctx.exponent = exponent
        return ops.pow(x, exponent)

    @staticmethod
    def backward(ctx: Context, grad: torch.Tensor) -> tuple:
        (x,) = ctx.saved_tensors
        p = ctx.exponent
        if p == 0:
            return scale(grad, 0.0), None
        derivative = scale(x, p) if p == 2 else scale(ops.pow(x, p - 1), p)
        return ops.mul(grad, derivative), None


class Exp(Function):
    @staticmethod
    def forward(ctx: Context, x: torch.Tensor) -> torch.Tensor:
        out = ops.exp(x)
        ctx.save_for_backward(out)
        return out

    @staticmethod
    def backward(ctx: Context, grad: torch.Tensor) -> torch.Tensor:
        (out,) = ctx.saved_tensors
        return ops.mul(grad, out)


class Log(Function):
    @staticmethod
    def forward(ctx: Context, x: torch.Tensor) -> torch.Tensor:
        ctx.save_for_backward(x)
        return ops.log(x)

    @staticmethod
    def backward(ctx: Context, grad: torch.Tensor) -> torch.Tensor:
        (x,) = ctx.saved_tensors
        return ops.div(grad, x)


class Tanh(Function):
    @staticmethod
    def forward(ctx: Context, x: torch.Tensor) -> torch.Tensor:
        out = ops.tanh(x)
        ctx.save_for_backward(out)
        return out

    @staticmethod
    def backward(ctx: Context, grad: torch.Tensor) -> torch.Tensor:
        (out,) = ctx.saved_tensors
        one_minus_square = ops.add(scalar(1.0, out), ops.mul(out, out), alpha=-1.0)
        return ops.mul(grad, one_minus_square)


class Relu(Function):
    @staticmethod
    def forward(ctx: Context, x: torch.Tensor) -> torch.Tensor:
        out = ops.relu(x)
        ctx.save_for_backward(out)
        return out

    @staticmethod
    def backward(ctx: Context, grad: torch.Tensor) -> torch.Tensor:
        (out,) = ctx.saved_tensors
        return ops.relu_backward(grad, out)


class Gelu(Function):
    @staticmethod
    def forward(ctx: Context, x: torch.Tensor, approximate: str) -> torch.Tensor:
        ctx.save_for_backward(x)
        ctx.approximate = approximate
        return ops.gelu(x, approximate=approximate)

    @staticmethod
    def backward(ctx: Context, grad: torch.Tensor) -> tuple:
        (x,) = ctx.saved_tensors
        return ops.gelu_backward(grad, x, approximate=ctx.approximate), None


class Softmax(Function):
    @staticmethod
    def forward(ctx: Context, x: torch.Tensor, dim: int) -> torch.Tensor:
        y = ops.softmax(x, dim=dim)
        ctx.save_for_backward(y)
        ctx.dim = dim
        return y

    @staticmethod
    def backward(ctx: Context, grad: torch.Tensor) -> tuple:
        (y,) = ctx.saved_tensors
        return ops.softmax_backward(grad, y, ctx.dim), None


class Dropout(Function):
    """Zero each element with probability p, scale the rest by 1/(1-p); the mask is a hash of
    (seed, position), so the backward recomputes it instead of storing it."""

    @staticmethod
    def forward(ctx: Context, x: torch.Tensor, p: float, seed: int) -> torch.Tensor:
        ctx.p, ctx.seed = p, seed
        return ops.dropout(x, p, seed)

    @staticmethod
    def backward(ctx: Context, grad: torch.Tensor) -> tuple:
        return ops.dropout(contiguous(grad), ctx.p, ctx.seed), None, None


class MatMul(Function):
    """a @ b with torch.matmul's rules for 1-D to N-D operands (batch dims broadcast)."""

    @staticmethod
    def forward(ctx: Context, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        ctx.save_for_backward(a, b)
        return _matmul(a, b)

    @staticmethod
    def backward(ctx: Context, grad: torch.Tensor) -> tuple:
        a, b = ctx.saved_tensors
        a2 = a.unsqueeze(0) if a.dim() == 1 else a
        b2 = b.unsqueeze(-1) if b.dim() == 1 else b
        g = grad
        if a.dim() == 1:
            g = g.unsqueeze(-2)
        if b.dim() == 1:
            g = g.unsqueeze(-1)
        grad_a = grad_b = None
        if ctx.needs_input_grad[0]:
            grad_a = unbroadcast(_matmul(g, b2.transpose(-1, -2)), a2.shape).reshape(a.shape)
        if ctx.needs_input_grad[1]:
            grad_b = unbroadcast(_matmul(a2.transpose(-1, -2), g), b2.shape).reshape(b.shape)
        return grad_a, grad_b


def _matmul(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """The matmul op on operands of any rank: 1-D ones as torch treats them, batch dims flattened."""
    if a.dim() == 1 and b.dim() == 1:
        return ops.matmul(a.view(1, -1), b.view(-1, 1)).view(())
    if a.dim() == 1:
        return _matmul(a.unsqueeze(0), b).squeeze(-2)
    if b.dim() == 1:
        return _matmul(a, b.unsqueeze(-1)).squeeze(-1)
    if a.dim() == 2 and b.dim() == 2:
        return ops.matmul(a, b)
    batch = torch.broadcast_shapes(a.shape[:-2], b.shape[:-2])
    m, n = a.shape[-2], b.shape[-1]
    if b.dim() == 2:  # one weight for every row of every batch: a single 2-D product
        out = ops.matmul(reshape(a, (-1, a.shape[-1])), b)
        return out.view(*batch, m, n)
    a3 = a.expand(*batch, *a.shape[-2:]).reshape(-1, *a.shape[-2:]) if a.dim() > 2 else a
    b3 = b.expand(*batch, *b.shape[-2:]).reshape(-1, *b.shape[-2:])
    return ops.matmul(a3, b3).view(*batch, m, n)


# --- reductions ---------------------------------------------------------------------------------

class Sum(Function):
    @staticmethod
    def forward(ctx: Context, x: torch.Tensor, dims: tuple[int, ...] | None, keepdim: bool) -> torch.Tensor:
        ctx.shape, ctx.dims, ctx.keepdim = x.shape, dims, keepdim
        return ops.sum(x, dim=dims, keepdim=keepdim)

    @staticmethod
    def backward(ctx: Context, grad: torch.Tensor) -> tuple:
        return materialize(_keepdim(grad, ctx.shape, ctx.dims, ctx.keepdim), ctx.shape), None, None


class Mean(Function):
    @staticmethod
    def forward(ctx: Context, x: torch.Tensor, dims: tuple[int, ...] | None, keepdim: bool) -> torch.Tensor:
        ctx.shape, ctx.dims, ctx.keepdim = x.shape, dims, keepdim
        return ops.mean(x, dim=dims, keepdim=keepdim)

    @staticmethod
    def backward(ctx: Context, grad: torch.Tensor) -> tuple:
        dims = range(len(ctx.shape)) if ctx.dims is None else ctx.dims
        count = math.prod(ctx.shape[d] for d in dims)
        grad = scale(grad, 1.0 / count) if count else grad
        return materialize(_keepdim(grad, ctx.shape, ctx.dims, ctx.keepdim), ctx.shape), None, None


def _keepdim(grad: torch.Tensor, shape: Sequence[int], dims: Sequence[int] | None, keepdim: bool) -> torch.Tensor:
    """A reduction's gradient viewed with the reduced dims kept as size 1 (to broadcast back)."""
    if dims is None:
        return grad.reshape((1,) * len(shape))
    if keepdim:
        return grad
    kept = [1 if d in {r % len(shape) for r in dims} else n for d, n in enumerate(shape)]
    return grad.reshape(kept)


class Max(Function):
    """(values, indices) of the max along ``dim`` (dim=None: of all elements)."""

    @staticmethod
    def forward(ctx: Context, x: torch.Tensor, dim: int | None, keepdim: bool) -> tuple:
        values, indices = run_op("max", x, dim=dim, keepdim=keepdim)
        ctx.save_for_backward(indices)
        ctx.shape, ctx.dim, ctx.keepdim = tuple(x.shape), dim, keepdim
        ctx.mark_non_differentiable(1)
        return values, indices

    @staticmethod
    def backward(ctx: Context, grad: torch.Tensor, _grad_indices: Any = None) -> tuple:
        (indices,) = ctx.saved_tensors
        return ops.max_backward(contiguous(grad), indices, ctx.dim, ctx.shape, ctx.keepdim), None, None


# --- views and layout ---------------------------------------------------------------------------

class View(Function):
    @staticmethod
    def forward(ctx: Context, x: torch.Tensor, shape: tuple[int, ...]) -> torch.Tensor:
        ctx.shape = x.shape
        return x.view(shape)

    @staticmethod
    def backward(ctx: Context, grad: torch.Tensor) -> tuple:
        return reshape(grad, ctx.shape), None


class Permute(Function):
    @staticmethod
    def forward(ctx: Context, x: torch.Tensor, dims: tuple[int, ...]) -> torch.Tensor:
        ctx.dims = dims
        return x.permute(dims)

    @staticmethod
    def backward(ctx: Context, grad: torch.Tensor) -> tuple:
        inverse = [0] * len(ctx.dims)
        for i, d in enumerate(ctx.dims):
            inverse[d % len(ctx.dims)] = i
        return grad.permute(inverse), None


class Expand(Function):
    @staticmethod
    def forward(ctx: Context, x: torch.Tensor, shape: tuple[int, ...]) -> torch.Tensor:
        ctx.shape = x.shape
        return x.expand(shape)

    @staticmethod
    def backward(ctx: Context, grad: torch.Tensor) -> tuple:
        return unbroadcast(grad, ctx.shape), None


class Contiguous(Function):
    @staticmethod
    def forward(ctx: Context, x: torch.Tensor) -> torch.Tensor:
        return materialize(x, x.shape)

    @staticmethod
    def backward(ctx: Context, grad: torch.Tensor) -> torch.Tensor:
        return grad


class Index(Function):
    """Basic indexing (ints, slices, None, Ellipsis): a view; its gradient is written into zeros."""

    @staticmethod
    def forward(ctx: Context, x: torch.Tensor, index: Any) -> torch.Tensor:
        parts = index if isinstance(index, tuple) else (index,)
        for part in parts:
            if not (part is None or part is Ellipsis or isinstance(part, (int, slice))) or isinstance(part, bool):
                raise TypeError(f"mytorch: only basic indexing (ints, slices, None, ...) is supported, "
                                f"got {type(part).__name__}")
        ctx.shape, ctx.index = x.shape, index
        return x[index]

    @staticmethod
    def backward(ctx: Context, grad: torch.Tensor) -> tuple:
        grad_x = full(ctx.shape, 0.0, grad)
        ops.copy_(grad_x[ctx.index], grad)
        return grad_x, None


class Unbind(Function):
    """The slices of x along dim, as views. When the gradients arrive as the slices of one buffer in
    x's layout (attention_backward writes dq, dk, dv so for a packed projection), that buffer is
    x's gradient as it is; otherwise they are copied into a new one."""

    @staticmethod
    def forward(ctx: Context, x: torch.Tensor, dim: int) -> tuple[torch.Tensor, ...]:
        ctx.shape, ctx.dim = x.shape, dim % x.dim()
        return x.unbind(ctx.dim)

    @staticmethod
    def backward(ctx: Context, *grads: torch.Tensor | None) -> tuple:
        return _stacked(grads, ctx.shape, ctx.dim), None


def _stacked(grads: Sequence[torch.Tensor | None], shape: Sequence[int], dim: int) -> torch.Tensor:
    """torch.stack(grads, dim) (None as zeros): a view when the grads already are its slices."""
    first = grads[0]
    if first is not None and len(grads) > 1 and all(g is not None and g.stride() == first.stride() for g in grads):
        step = grads[1].data_ptr() - first.data_ptr()
        size = first.element_size()
        same = all(g.untyped_storage().data_ptr() == first.untyped_storage().data_ptr() for g in grads)
        if same and step > 0 and step % size == 0 and \
                all(g.data_ptr() - first.data_ptr() == i * step for i, g in enumerate(grads)):
            strides = list(first.stride())
            strides.insert(dim, step // size)
            stacked = first.as_strided(tuple(shape), strides, first.storage_offset())
            if _no_overlap(stacked):
                return stacked
    out = torch.empty(tuple(shape), dtype=next(g for g in grads if g is not None).dtype,
                      device=next(g for g in grads if g is not None).device)
    for i, g in enumerate(grads):
        if g is None:
            ops.copy_(out.select(dim, i), scalar(0.0, out))
        else:
            ops.copy_(out.select(dim, i), g)
    return out


def _no_overlap(t: torch.Tensor) -> bool:
    """Whether no two elements of the strided view t share memory (sorted strides nest)."""
    span = 1
    for stride, size in sorted((s, n) for s, n in zip(t.stride(), t.shape) if n > 1):
        if stride < span:
            return False
        span = stride * size
    return True


# --- layers -------------------------------------------------------------------------------------

class Linear(Function):
    @staticmethod
    def forward(ctx: Context, x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
        ctx.save_for_backward(x, weight)
        ctx.has_bias = bias is not None
        return ops.linear(x, weight, bias)

    @staticmethod
    def backward(ctx: Context, grad: torch.Tensor) -> tuple:
        x, weight = ctx.saved_tensors
        grads = ops.linear_backward(grad, x, weight, bias=ctx.has_bias)
        return grads[0], grads[1], grads[2] if ctx.has_bias else None


class Conv2d(Function):
    @staticmethod
    def forward(ctx: Context, x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None,
                stride: Any, padding: Any, dilation: Any) -> torch.Tensor:
        ctx.save_for_backward(x, weight)
        ctx.params = {"stride": stride, "padding": padding, "dilation": dilation}
        ctx.has_bias = bias is not None
        return ops.conv2d(x, weight, bias, **ctx.params)

    @staticmethod
    def backward(ctx: Context, grad: torch.Tensor) -> tuple:
        x, weight = ctx.saved_tensors
        grads = ops.conv2d_backward(grad, x, weight, bias=ctx.has_bias, **ctx.params)
        return grads[0], grads[1], grads[2] if ctx.has_bias else None, None, None, None


class MaxPool2d(Function):
    @staticmethod
    def forward(ctx: Context, x: torch.Tensor, kernel_size: Any, stride: Any, padding: Any) -> torch.Tensor:
        out, indices = run_op("max_pool2d", x, kernel_size, stride=stride, padding=padding)
        ctx.save_for_backward(indices)
        ctx.shape, ctx.params = tuple(x.shape), (kernel_size, stride, padding)
        return out

    @staticmethod
    def backward(ctx: Context, grad: torch.Tensor) -> tuple:
        (indices,) = ctx.saved_tensors
        kernel_size, stride, padding = ctx.params
        grad_x = ops.max_pool2d_backward(grad, indices, ctx.shape, kernel_size, stride=stride, padding=padding)
        return grad_x, None, None, None


class LayerNorm(Function):
    @staticmethod
    def forward(ctx: Context, x: torch.Tensor, normalized_shape: tuple[int, ...], weight: torch.Tensor | None,
                bias: torch.Tensor | None, eps: float) -> torch.Tensor:
        y, mean, rstd = run_op("layer_norm", x, normalized_shape, weight, bias, eps)
        ctx.save_for_backward(x, weight, mean, rstd)
        ctx.normalized_shape = normalized_shape
        return y

    @staticmethod
    def backward(ctx: Context, grad: torch.Tensor) -> tuple:
        x, weight, mean, rstd = ctx.saved_tensors
        dx, dw, db = ops.layer_norm_backward(grad, x, mean, rstd, ctx.normalized_shape, weight)
        need = ctx.needs_input_grad
        return dx, None, dw if need[2] else None, db if need[3] else None, None


class CrossEntropy(Function):
    @staticmethod
    def forward(ctx: Context, logits: torch.Tensor, target: torch.Tensor, reduction: str, ignore_index: int,
                label_smoothing: float) -> torch.Tensor:
        loss, lse = run_op("cross_entropy", logits, target, reduction=reduction, ignore_index=ignore_index,
                           label_smoothing=label_smoothing)
        ctx.save_for_backward(logits, target, lse)
        ctx.params = {"reduction": reduction, "ignore_index": ignore_index, "label_smoothing": label_smoothing}
        return loss

    @staticmethod
    def backward(ctx: Context, grad: torch.Tensor) -> tuple:
        logits, target, lse = ctx.saved_tensors
        return ops.cross_entropy_backward(grad, logits, target, lse, **ctx.params), None, None, None, None


class Embedding(Function):
    @staticmethod
    def forward(ctx: Context, indices: torch.Tensor, weight: torch.Tensor, padding_idx: int | None) -> torch.Tensor:
        ctx.save_for_backward(indices)
        ctx.num_weights, ctx.padding_idx = weight.shape[0], padding_idx
        return ops.embedding(indices, weight, padding_idx)

    @staticmethod
    def backward(ctx: Context, grad: torch.Tensor) -> tuple:
        (indices,) = ctx.saved_tensors
        return None, ops.embedding_backward(contiguous(grad), indices, ctx.num_weights, ctx.padding_idx), None


class Attention(Function):
    """softmax(q·kᵀ·scale + mask)·v; the backward recomputes from the saved log-sum-exp."""

    @staticmethod
    def forward(ctx: Context, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, attn_mask: torch.Tensor | None,
                causal: bool, scale: float | None) -> torch.Tensor:
        o, lse = run_op("attention", q, k, v, causal=causal, scale=scale, attn_mask=attn_mask)
        ctx.save_for_backward(q, k, v, o, lse, attn_mask)
        ctx.params = {"causal": causal, "scale": scale}
        return o

    @staticmethod
    def backward(ctx: Context, grad: torch.Tensor) -> tuple:
        q, k, v, o, lse, attn_mask = ctx.saved_tensors
        dq, dk, dv = ops.attention_backward(q, k, v, o, lse, grad, attn_mask=attn_mask, **ctx.params)
        return dq, dk, dv, None, None, None
