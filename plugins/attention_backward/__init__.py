"""attention_backward(q, k, v, o, lse, do, *, causal=False, scale=None, attn_mask=None) -> (dq, dk, dv):
the gradients of the op attention (see its spec for the semantics) for the output gradient do.

    P = softmax(q·kᵀ·scale + mask)        dv = Pᵀ·do        dS = P∘(do·vᵀ − rowsum(do∘o))
    dq = dS·k·scale                       dk = dSᵀ·q·scale (dk and dv summed over each GQA group)

o and lse are the forward's outputs (lse: float32 (B, Hq, Nq), natural log, -inf for rows that
attend no key); implementations use them (lse to recompute P, o for rowsum(do∘o)) instead of
redoing the forward. Rows that attend no key contribute nothing: their dq is 0. dq has q's shape,
dk and dv k's and v's, all in the inputs' dtype. The mask gets no gradient.

Shapes, buckets and flags are those of the forward op; FLOPs count 2.5× the forward's (the
backward's five products against the forward's two, as FlashAttention counts them).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch
from kernelzoo_plugins._flash.spec import (
    AttentionSpecBase,
    CaseSpec,
    attention_backward_math,
    attention_math,
    bad_cases,
    case_specs,
    case_tensor,
    check_qkv_mask,
    compare,
    like,
    make_qkv,
    output_atol,
    shape_text,
)

from kernelzoo.errors import ArgumentError, DeviceError, DTypeError
from kernelzoo.registry import BadCase, Call, Case, check_same, check_tensor, randn
from kernelzoo.tolerance import Mismatch

GRADIENT_NAMES = ("dq", "dk", "dv")


def forward_outputs(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, kwargs: dict[str, Any]) -> tuple:
    """The forward's (o, lse) for backward inputs: o computed in float64 and rounded to q's dtype
    (in q's memory order), lse in float32."""
    inputs, params = check_qkv_mask("attention", q, k, v, kwargs.get("causal", False), kwargs.get("scale"),
                                    kwargs.get("attn_mask"))
    o, lse = attention_math(q, k, v, inputs.get("attn_mask"), params["causal"], params["scale"], torch.float64)
    return torch.empty_like(q).copy_(o), lse.float()


def gradients_like(call: Call) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """New dq, dk, dv in the memory order of q, k and v (see ``like``). When q, k and v are the three
    slices of one packed projection ((B, N, 3, H, D) memory: self-attention's fused in-projection),
    the gradients are the three slices of one new packed buffer, so that a framework can hand the
    projection's backward a single gradient without copying."""
    q, k, v = (call.inputs[name] for name in ("q", "k", "v"))
    b, h, n, d = q.shape
    step = h * d
    packed = (q.shape == k.shape == v.shape and q.stride() == k.stride() == v.stride() == (3 * n * step, d, 3 * step, 1)
              and q.untyped_storage().data_ptr() == k.untyped_storage().data_ptr() == v.untyped_storage().data_ptr()
              and k.data_ptr() - q.data_ptr() == v.data_ptr() - k.data_ptr() == step * q.element_size())
    if packed:
        buffer = call.empty((b, n, 3, h, d))
        return buffer[:, :, 0].transpose(1, 2), buffer[:, :, 1].transpose(1, 2), buffer[:, :, 2].transpose(1, 2)
    return like(call, q), like(call, k), like(call, v)


def trivial_backward(call: Call) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None:
    """Zero gradients of a call with no work (an empty dimension, or no key), else None."""
    q, k = call.inputs["q"], call.inputs["k"]
    if q.numel() and k.shape[2]:
        return None
    return tuple(g.zero_() for g in gradients_like(call))  # type: ignore[return-value]


class AttentionBackward(AttentionSpecBase):
    """attention_backward(q, k, v, o, lse, do, *, causal=False, scale=None, attn_mask=None) -> (dq, dk, dv):
    the gradients of attention, from its outputs o and lse and the output gradient do."""

    name = "attention_backward"
    checks_every_call = True  # whether q, k and v are views of one packed tensor
    outputs = 3  # dq, dk, dv

    def check(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, o: torch.Tensor, lse: torch.Tensor,
              do: torch.Tensor, *, causal: bool = False, scale: float | None = None,
              attn_mask: torch.Tensor | None = None) -> Call:
        inputs, params = check_qkv_mask(self.name, q, k, v, causal, scale, attn_mask)
        # o, lse and do nearly always agree with q: one test of the whole lets them through at a third of the named
        # checks' host time, and the checks that name what is wrong run only when it fails
        tensor, q_shape, dtype, device = torch.Tensor, q.shape, q.dtype, q.device
        if not (type(o) is tensor and type(do) is tensor and type(lse) is tensor and o.shape == q_shape
                and do.shape == q_shape and lse.shape == q_shape[:3] and o.dtype is dtype and do.dtype is dtype
                and lse.dtype is torch.float32 and o.device == device and do.device == device
                and lse.device == device):
            self._check_outputs(q, o, lse, do)
        mask = inputs.pop("attn_mask", None)
        inputs.update(o=o, lse=lse, do=do)
        if mask is not None:
            inputs["attn_mask"] = mask
        return Call(self, inputs, params)

    def _check_outputs(self, q: torch.Tensor, o: Any, lse: Any, do: Any) -> None:
        for name, t in (("o", o), ("do", do)):
            check_tensor(self.name, name, t)
            check_same(self.name, q=q, **{name: t})
            if t.shape != q.shape:
                raise ArgumentError(f"{self.name}: {name} of shape {shape_text(t)} must have q's shape "
                                    f"{shape_text(q)}")
        check_tensor(self.name, "lse", lse, (torch.float32,))
        if lse.device != q.device:
            raise DeviceError(f"{self.name}: q is on {q.device} but lse is on {lse.device}; expected one device")
        if lse.shape != q.shape[:3]:
            raise ArgumentError(f"{self.name}: lse of shape {shape_text(lse)} must be (batch, heads, n_q) = "
                                f"{'x'.join(map(str, q.shape[:3]))}")

    def fake(self, call: Call) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """dq, dk, dv of q's, k's and v's shapes and dtype (the torch plugin aligns its inputs by their addresses,
        which fake tensors lack)."""
        return tuple(call.inputs[name].new_empty(call.inputs[name].shape) for name in ("q", "k", "v"))

    def reference(self, call: Call) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        i = call.inputs
        return attention_backward_math(i["q"], i["k"], i["v"], i["do"], i.get("attn_mask"), call.params["causal"],
                                       call.params["scale"], torch.float64)

    def example(self, shape: Sequence[int], dtype: torch.dtype, device: torch.device | str,
                generator: torch.Generator | None = None, **params: Any) -> Call:
        (q, k, v), kwargs = self.example_inputs(shape, dtype, device, generator, params)
        o, lse = forward_outputs(q, k, v, kwargs)
        return self.check(q, k, v, o, lse, randn(q.shape, device, dtype, generator), **kwargs)

    def flops(self, call: Call) -> float:
        return 2.5 * self.forward_flops(call)

    def bytes(self, call: Call) -> float:
        q, k = call.inputs["q"], call.inputs["k"]
        mask = call.inputs.get("attn_mask")
        n = 4 * q.numel() + 4 * k.numel()  # q, o, do read, dq written; k, v read, dk, dv written
        return float(n * q.element_size() + 4 * q[..., 0].numel()
                     + (mask.numel() * mask.element_size() if mask is not None else 0))

    def verify(self, call: Call, outputs: Any, reference: Any) -> Mismatch | None:
        if not isinstance(outputs, tuple) or len(outputs) != 3:
            return Mismatch("expected the outputs (dq, dk, dv)")
        for name, t in zip(GRADIENT_NAMES, outputs):
            if t.dtype != call.dtype or t.device != call.device:
                return Mismatch(f"{name} is {t.dtype} on {t.device}, expected {call.dtype} on {call.device}")
        i = call.inputs
        baseline = attention_backward_math(i["q"], i["k"], i["v"], i["do"], i.get("attn_mask"), call.params["causal"],
                                           call.params["scale"], call.dtype, o=i["o"])
        for name, out, ref, base in zip(GRADIENT_NAMES, outputs, reference, baseline):
            why = compare(name, out, ref, base, output_atol(call.dtype, ref))
            if why:
                return Mismatch(why)
        return None

    def cases(self) -> list[Case]:
        return [Case(case_id, _backward_case(spec), small) for case_id, spec, small in case_specs()]

    def bad_cases(self) -> list[BadCase]:
        def q_like(q: Any, **kw: Any) -> torch.Tensor:
            return torch.ones(q.shape if isinstance(q, torch.Tensor) else (1, 1, 1, 1), **kw)

        def with_grads(args: tuple, o: Callable = q_like, lse: Callable | None = None, do: Callable = q_like) -> tuple:
            q = args[0]
            lse_t = lse(q) if lse else torch.zeros(q.shape[:3] if isinstance(q, torch.Tensor) else (1, 1, 1))
            return (*args, o(q), lse_t, do(q))

        def grads(**kw: Callable) -> Callable[[], tuple[tuple, dict]]:
            q, k = torch.ones(1, 2, 5, 8), torch.ones(1, 2, 6, 8)
            return lambda: (with_grads((q, k, k), **kw), {})
        return [
            *bad_cases(self.name, with_grads),
            BadCase("do-shape", grads(do=lambda q: torch.ones(1, 2, 5, 4)), ArgumentError,
                    "do of shape 1x2x5x4 must have q's shape 1x2x5x8"),
            BadCase("o-dtype", grads(o=lambda q: q_like(q, dtype=torch.float16)), DTypeError,
                    "q is torch.float32 but o is torch.float16"),
            BadCase("lse-dtype", grads(lse=lambda q: torch.zeros(1, 2, 5, dtype=torch.float16)), DTypeError,
                    "lse must be float32, got torch.float16"),
            BadCase("lse-shape", grads(lse=lambda q: torch.zeros(1, 2, 6)), ArgumentError,
                    "lse of shape 1x2x6 must be (batch, heads, n_q) = 1x2x5"),
        ]


def _backward_case(spec: CaseSpec) -> Callable:
    def make(device: torch.device, dtype: torch.dtype, g: torch.Generator) -> tuple[tuple, dict]:
        (q, k, v), kwargs = make_qkv(spec, device, dtype, g)
        do = case_tensor(q.shape, spec["layout"], device, dtype, g)
        return (q, k, v, *forward_outputs(q, k, v, kwargs), do), kwargs
    return make
