"""mytorch's Functions: each forward and backward is one or a few kernelzoo ops, so whatever won
the tuning for the call's device, dtype and shape runs. torch appears only as memory: views
(metadata), allocation of outputs, and moves between devices."""

from __future__ import annotations

import inspect
from collections.abc import Sequence
from typing import Any

import torch

from kernelzoo import autograd as kz_autograd
from kernelzoo import dispatch, ops
from kernelzoo.registry import registry
from mytorch.autograd import Context, Function

run_op = dispatch.run_op  # all of an op's outputs (extras for the backward included)


# --- helpers: scalars, fills, broadcasting --------------------------------------------------------

# the scalars handed out, by (value, dtype, device); a captured CUDA graph keeps those it may read (see
# mytorch.cuda), so that starting the table over never frees one under a graph
scalars: dict[tuple[float, torch.dtype, torch.device], torch.Tensor] = {}
SCALARS_LIMIT = 256


def scalar(value: float, like: torch.Tensor) -> torch.Tensor:
    """A 0-d tensor of ``value`` in ``like``'s dtype and device (shared: never written to)."""
    key = (float(value), like.dtype, like.device)
    found = scalars.get(key)
    if found is None:
        if len(scalars) >= SCALARS_LIMIT:
            scalars.clear()
        found = scalars[key] = torch.tensor(key[0], dtype=like.dtype, device=like.device)
    return found


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


# Sum ``grad`` over the dimensions that broadcasting expanded, back to ``shape``.
unbroadcast = kz_autograd.reduced


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


class SplitHeads(Function):
    """A packed in-projection ``qkv`` (B, L, 3·H·D) as q, k and v of shape (B, H, L, D): views of its
    (B, L, 3, H, D) layout, in one Function (the view, unbind, reshape and transpose it stands for would
    each be a node of the graph). The backward hands back the buffer the three gradients are slices of
    when attention_backward wrote them in this layout, as :class:`Unbind` does, else a new one."""

    @staticmethod
    def forward(ctx: Context, qkv: torch.Tensor, heads: int) -> tuple[torch.Tensor, ...]:
        batch, length, width = qkv.shape
        if width % (3 * heads):
            raise ValueError(f"mytorch: SplitHeads: the last dim ({width}) must be a multiple of 3 x heads "
                             f"({3 * heads})")
        ctx.shape = qkv.shape
        parts = reshape(qkv, (batch, length, 3, heads, width // (3 * heads)))
        return parts.permute(2, 0, 3, 1, 4).unbind(0)

    @staticmethod
    def backward(ctx: Context, *grads: torch.Tensor | None) -> tuple:
        batch, length = ctx.shape[:2]
        if all(g is None for g in grads):
            return None, None
        rows = [None if g is None else g.transpose(1, 2) for g in grads]  # (B, L, H, D) each
        heads, head_dim = next(g for g in rows if g is not None).shape[2:]
        stacked = _stacked(rows, (batch, length, 3, heads, head_dim), 2)
        return reshape(stacked, ctx.shape), None


class MergeHeads(Function):
    """Attention's output (B, H, L, D) as (B, L, H·D): its heads side by side again, in one Function (a view
    where the layout allows, as the attention op's output for a packed projection does, else a copy)."""

    @staticmethod
    def forward(ctx: Context, x: torch.Tensor) -> torch.Tensor:
        batch, heads, length, head_dim = x.shape
        ctx.shape = (batch, length, heads, head_dim)
        return reshape(x.transpose(1, 2), (batch, length, heads * head_dim))

    @staticmethod
    def backward(ctx: Context, grad: torch.Tensor) -> torch.Tensor:
        return reshape(grad, ctx.shape).transpose(1, 2)


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


# --- ops whose spec declares a derivative ---------------------------------------------------------

def declared(op: str, arguments: Sequence[str], doc: str = "") -> type[Function]:
    """The mytorch Function of ``op`` from the derivative its spec declares (the one torch autograd's
    registration reads too). ``arguments``: the op's check() parameters that ``apply`` takes, in order.

    What :func:`kernelzoo.autograd.keep` and :func:`~kernelzoo.autograd.kept` do is written out here: every
    op of a model's forward and backward runs through these two functions."""
    arguments = tuple(arguments)
    positional: dict[Any, bool] = {}  # per op spec: whether check() takes ``arguments`` as its first positionals

    def forward(ctx: Context, *values: Any) -> Any:
        spec = registry.op(op)
        by_position = positional.get(spec)
        if by_position is None:
            by_position = positional[spec] = _leading(spec.check, arguments)
        call = spec.check(*values) if by_position else spec.check(**dict(zip(arguments, values)))
        derivative = spec.derivative
        if derivative.recording is not None and any(ctx.needs_input_grad):
            call = derivative.recording(call)
        outputs = dispatch.run_call(spec, call)
        if not isinstance(outputs, tuple):
            outputs = tuple(outputs) if isinstance(outputs, list) else (outputs,)
        saved = derivative.save(call, outputs)
        names, tensors = [], []
        for name, value in saved.items():
            if isinstance(value, torch.Tensor):
                names.append(name)
                tensors.append(value)
        if names:
            for name in names:
                del saved[name]
            ctx.save_for_backward(*tensors)
        ctx.kept_names, ctx.kept_values, ctx.derivative, ctx.plugin = names, saved, derivative, dispatch.forced_plugin()
        returns = derivative.returns
        if returns == 1:
            return outputs[0]
        ctx.mark_non_differentiable(*range(1, returns))
        return outputs[:returns]

    def backward(ctx: Context, grad: torch.Tensor, *_: Any) -> tuple:
        saved = ctx.kept_values
        if ctx.kept_names:
            saved = {**saved, **dict(zip(ctx.kept_names, ctx.saved_tensors))}
        if ctx.plugin:
            with dispatch.use(ctx.plugin):
                found = ctx.derivative.backward(saved, grad)
        else:
            found = ctx.derivative.backward(saved, grad)
        grads = []
        for name, need in zip(arguments, ctx.needs_input_grad):
            g = found.get(name) if need else None
            # an expanded view (sum's) becomes a tensor of its own: optimizers write leaf grads in place
            if g is not None and not g.is_contiguous() and not _no_overlap(g):
                g = materialize(g, g.shape)
            grads.append(g)
        return tuple(grads)

    name = "".join(part[:1].upper() + part[1:] for part in op.split("_"))  # max_pool2d: MaxPool2d
    return type(name, (Function,), {"forward": staticmethod(forward), "backward": staticmethod(backward),
                                    "__doc__": doc or f"The op {op}, differentiated as its spec declares.",
                                    "__module__": __name__})


def _leading(check: Any, arguments: tuple[str, ...]) -> bool:
    """Whether ``check``'s first parameters are ``arguments``, in order, each one positional."""
    parameters = list(inspect.signature(check).parameters.values())[:len(arguments)]
    kinds = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    return [p.name for p in parameters] == list(arguments) and all(p.kind in kinds for p in parameters)


Add = declared("add", ("a", "b", "alpha"), "a + alpha·b (alpha = -1 is subtraction).")
Mul = declared("mul", ("a", "b"))
Div = declared("div", ("a", "b"))
Pow = declared("pow", ("x", "exponent"), "x ** exponent for a real exponent.")
Exp = declared("exp", ("x",))
Log = declared("log", ("x",))
Tanh = declared("tanh", ("x",))
Relu = declared("relu", ("x",))
Gelu = declared("gelu", ("x", "approximate"))
Dropout = declared("dropout", ("x", "p", "seed"),
                   "Zero each element with probability p, scale the rest by 1/(1-p); the backward recomputes the mask.")
Softmax = declared("softmax", ("x", "dim"))
Sum = declared("sum", ("x", "dim", "keepdim"))
Mean = declared("mean", ("x", "dim", "keepdim"))
Max = declared("max", ("x", "dim", "keepdim"), "(values, indices) of the max along ``dim`` (None: of all elements).")
Linear = declared("linear", ("x", "weight", "bias", "activation"),
                  "act(x·weightᵀ + bias); with gelu the forward keeps the pre-activation for the backward.")
Conv2d = declared("conv2d", ("x", "weight", "bias", "stride", "padding", "dilation"))
MaxPool2d = declared("max_pool2d", ("x", "kernel_size", "stride", "padding"))
LayerNorm = declared("layer_norm", ("x", "normalized_shape", "weight", "bias", "eps"))
CrossEntropy = declared("cross_entropy", ("logits", "target", "reduction", "ignore_index", "label_smoothing"))
Embedding = declared("embedding", ("indices", "weight", "padding_idx"))
Attention = declared("attention", ("q", "k", "v", "attn_mask", "causal", "scale"),
                     "softmax(q·kᵀ·scale + mask)·v; the backward recomputes from the saved log-sum-exp.")
