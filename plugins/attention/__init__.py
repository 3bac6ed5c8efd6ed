"""attention(q, k, v, *, causal=False, scale=None, attn_mask=None): scaled dot-product attention
with torch.nn.functional.scaled_dot_product_attention's semantics, the forward pass.

    o = softmax(q·kᵀ·scale + mask) · v        q (B, Hq, Nq, D); k, v (B, Hk, Nk, D); o like q

- Grouped-query attention: Hq is a multiple of Hk; query head h reads key/value head h // (Hq/Hk).
- causal: query i attends keys j ≤ i, torch's is_causal (the top-left aligned lower triangle) also
  when Nq ≠ Nk. FlashAttention's own causal flag aligns bottom-right instead; this op does not.
- scale defaults to 1/sqrt(D).
- attn_mask: boolean (True = attend) or additive float (bool, float32, float16 or bfloat16),
  broadcastable to (B, Hq, Nq, Nk); a key-padding mask (B, 1, 1, Nk) is the common case. It may be
  combined with causal (torch's SDPA refuses both; here both apply).
- A query row that attends no key at all gives o = 0 and lse = -inf, and gradients 0 through it:
  never NaN (torch's SDPA has given NaN there; its CPU kernels give 0 with lse = 0).
- NaN in what a row attends makes that row NaN. NaN in a key or value a row does not attend may
  or may not reach it (0·NaN in a full P·V product does, a skipped causal block does not), so the
  conformance cases hold no NaN; torch's own kernels differ the same way.

Every implementation returns (o, lse): lse[b, h, i] = log Σ_j exp(s_ij), the natural-log
log-sum-exp of row i's scaled, masked scores, float32 of shape (B, Hq, Nq), which the backward op
(attention_backward) needs. ``kernelzoo.ops.attention`` returns o only, and records a backward
through attention_backward when q, k or v requires grad.

FP8 (forward only): q, k, v of float8_e4m3fn or float8_e5m2 (one kind), with FlashAttention-3's
``q_descale``, ``k_descale``, ``v_descale`` (float32, one element or (batch, kv_heads); None means 1) and
``out_dtype`` (bfloat16, the default, or float16). The call means the op on the dequantized inputs
q.float()·q_descale, ...; o is in out_dtype, lse float32. The reference computes it in float64; a result
passes when, for o, max|o − ref| ≤ 2·max|base − ref| + atol where base is float32 tensor-op math on the
dequantized inputs with its o rounded to out_dtype, and atol is out_dtype's (1e-3·max(1, max|ref|)); for
lse the same rule with base in float32 and atol 1e-2. Descales with 16/32-bit inputs, or an out_dtype
other than theirs, are errors. A call whose inputs (or descales) require grad raises: there is no FP8
backward. Descales do not change a kernel, so they are not in the tuning key; out_dtype float16 is the
flag "out_dtype=float16".

Shapes for tuning and benchmarks are tuples (B, H, N, D, causal) with Nq = Nk = N, Hq = Hk = H
and causal 0 or 1: (4, 32, 4096, 128, 1) is "4x32x4096x128" with the flag "causal". ``example``
also takes ``kv_heads=``, ``n_k=``, ``causal=`` and ``scale=`` keywords for other calls, and for an
8-bit float dtype ``descale=`` ("tensor" or "head": amax-quantized inputs with their descales) and
``out_dtype=``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from kernelzoo_plugins._flash.fp8 import (
    DESCALES,
    check_fp8,
    check_qkv_mask_fp8,
    dequantized,
    fp8_case,
    fp8_case_specs,
    fp8_of,
    is_fp8,
    output_dtype,
    quantized_inputs,
)
from kernelzoo_plugins._flash.spec import (
    AttentionSpecBase,
    attention_math,
    bad_cases,
    case_specs,
    check_qkv_mask,
    compare,
    lse_atol,
    output_atol,
)

from kernelzoo import ops
from kernelzoo.errors import ArgumentError, DeviceError, DTypeError
from kernelzoo.registry import FLOATS, FP8, BadCase, Call, Case, Derivative, parse_dtype
from kernelzoo.tolerance import Mismatch, Tolerance


def _backward(saved: dict, grad: torch.Tensor) -> dict:
    if "out_dtype" in saved["params"]:  # reached only where needs_autograd is not asked (torch.ops.kernelzoo)
        raise ArgumentError("attention: 8-bit float (FP8) attention is forward-only; it has no backward")
    return dict(zip(("q", "k", "v"), ops.attention_backward(
        saved["q"], saved["k"], saved["v"], saved["o"], saved["lse"], grad, attn_mask=saved["attn_mask"],
        **saved["params"])))


class Attention(AttentionSpecBase):
    """attention(q, k, v, *, causal=False, scale=None, attn_mask=None) -> o: softmax(q·kᵀ·scale + mask)·v
    with grouped-query heads, torch's top-left causal mask, and 0 for rows that attend no key."""

    name = "attention"
    outputs = 2  # o and the log-sum-exp
    # The 8-bit floats (this op's alone) are tuned when asked (--dtype float8_e4m3fn) on either device.
    tune_dtypes = {"cuda": (torch.float16, torch.bfloat16), "cpu": (torch.float32,)}
    # the derivative: attention_backward recomputes the probabilities from the saved log-sum-exp
    derivative = Derivative(
        inputs=("q", "k", "v"),
        save=lambda call, outputs: {**call.inputs, "attn_mask": call.inputs.get("attn_mask"), "o": outputs[0],
                                    "lse": outputs[1], "params": dict(call.params)},
        backward=_backward,
    )

    def check(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, causal: bool = False,
              scale: float | None = None, attn_mask: torch.Tensor | None = None,
              q_descale: torch.Tensor | None = None, k_descale: torch.Tensor | None = None,
              v_descale: torch.Tensor | None = None, out_dtype: torch.dtype | None = None) -> Call:
        if isinstance(q, torch.Tensor) and q.dtype not in FLOATS:  # 8-bit floats (or a dtype no call takes)
            inputs, params = check_qkv_mask_fp8(self.name, q, k, v, causal, scale, attn_mask)
        else:
            inputs, params = check_qkv_mask(self.name, q, k, v, causal, scale, attn_mask)
        if q.dtype in FP8 or out_dtype is not None or q_descale is not None or k_descale is not None \
                or v_descale is not None:
            descales, fp8_params = check_fp8(self.name, q, k, dict(zip(DESCALES, (q_descale, k_descale, v_descale))),
                                             out_dtype)
            inputs.update(descales)
            params.update(fp8_params)
        return Call(self, inputs, params)

    def reference(self, call: Call) -> tuple[torch.Tensor, torch.Tensor]:
        q, k, v = self._inputs(call, torch.float64)
        return attention_math(q, k, v, call.inputs.get("attn_mask"), call.params["causal"], call.params["scale"],
                              torch.float64)

    @staticmethod
    def _inputs(call: Call, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """q, k, v as the math takes them: dequantized in ``dtype`` for FP8 calls, else as they are."""
        i = call.inputs
        return dequantized(call, dtype) if is_fp8(call) else (i["q"], i["k"], i["v"])

    def example(self, shape: Sequence[int], dtype: torch.dtype, device: torch.device | str,
                generator: torch.Generator | None = None, **params: Any) -> Call:
        """Unit-normal q, k, v of ``shape``; for an 8-bit float dtype quantized with amax descales per tensor, or
        per (batch, kv head) with ``descale="head"``, output in ``out_dtype`` (a name; bfloat16 by default)."""
        descale, out = params.pop("descale", "tensor"), params.pop("out_dtype", None)
        if dtype not in FP8:
            args, kwargs = self.example_inputs(shape, dtype, device, generator, params)
            return self.check(*args, **kwargs)
        args, kwargs = self.example_inputs(shape, torch.float32, device, generator, params)
        qkv, descales = quantized_inputs(*args, dtype, descale)
        out_dtype = parse_dtype(out) if isinstance(out, str) else out
        return self.check(*qkv, **kwargs, **descales, out_dtype=out_dtype or torch.bfloat16)

    def flags(self, call: Call) -> str:
        flags = super().flags(call)
        if call.params.get("out_dtype", "bfloat16") != "bfloat16":  # another kernel's output store
            flags = "-".join(filter(None, [flags, f"out_dtype={call.params['out_dtype']}"]))
        return flags

    def tolerance(self, call: Call) -> Tolerance:
        # check_close's users (the demo): an FP8 call's o is held as a 16-bit call's of its out_dtype
        if not is_fp8(call):
            return super().tolerance(call)
        return {torch.float16: Tolerance(5e-3, 5e-3), torch.bfloat16: Tolerance(4e-2, 4e-2)}[output_dtype(call)]

    def flops(self, call: Call) -> float:
        return self.forward_flops(call)

    def bytes(self, call: Call) -> float:
        q, k = call.inputs["q"], call.inputs["k"]
        mask = call.inputs.get("attn_mask")
        read = (q.numel() + 2 * k.numel()) * q.element_size()  # q, k, v
        written = q.numel() * output_dtype(call).itemsize + 4 * q[..., 0].numel()  # o and lse
        return float(read + written + (mask.numel() * mask.element_size() if mask is not None else 0))

    def verify(self, call: Call, outputs: Any, reference: Any) -> Mismatch | None:
        if not isinstance(outputs, tuple) or len(outputs) != 2:
            return Mismatch("expected the outputs (o, lse)")
        (o, lse), (o_ref, lse_ref) = outputs, reference
        out = output_dtype(call)
        for name, t, dtype in (("o", o, out), ("lse", lse, torch.float32)):
            if t.dtype != dtype or t.device != call.device:
                return Mismatch(f"{name} is {t.dtype} on {t.device}, expected {dtype} on {call.device}")
        # the baseline: the same math in the input precision; for FP8 inputs float32 on the dequantized inputs,
        # o rounded to out_dtype (the rule FP8 kernels are held to: see the module's docstring)
        base = torch.float32 if is_fp8(call) else call.dtype
        base_o, base_lse = attention_math(*self._inputs(call, base), call.inputs.get("attn_mask"),
                                          call.params["causal"], call.params["scale"], base)
        base_o = base_o.to(out)
        why = (compare("o", o, o_ref, base_o, output_atol(out, o_ref))
               or compare("lse", lse, lse_ref, base_lse, lse_atol(out)))
        return Mismatch(why) if why else None

    def cases(self) -> list[Case]:
        return ([Case(case_id, fp8_of(spec), small) for case_id, spec, small in case_specs()]
                + [Case(case_id, fp8_case(spec), small) for case_id, spec, small in fp8_case_specs()])

    def bad_cases(self) -> list[BadCase]:
        # the family's int-dtype case names the 16/32-bit floats only; int8-dtype is this op's
        return [bad for bad in bad_cases(self.name) if bad.id != "int-dtype"] + _fp8_bad_cases()

    # --- autograd ----------------------------------------------------------------------------
    def result(self, call: Call, outputs: Any) -> torch.Tensor:
        return outputs[0]

    def fake(self, call: Call) -> tuple[torch.Tensor, torch.Tensor]:
        """o (B, Hq, Nq, Dv) in q's dtype and the log-sum-exp (B, Hq, Nq) in float32 (the torch plugin aligns its
        inputs by their addresses, which fake tensors lack)."""
        q, v = call.inputs["q"], call.inputs["v"]
        return (q.new_empty((*q.shape[:-1], v.shape[-1]), dtype=output_dtype(call)),
                q.new_empty(q.shape[:-1], dtype=torch.float32))

    def needs_autograd(self, call: Call) -> bool:
        mask = call.inputs.get("attn_mask")
        if mask is not None and mask.requires_grad and torch.is_grad_enabled():
            raise ArgumentError("attention: attn_mask requires grad, but gradients with respect to the mask "
                                "are not computed; pass attn_mask.detach()")
        if is_fp8(call) and torch.is_grad_enabled():
            wanting = [name for name in ("q", "k", "v", *DESCALES)
                       if name in call.inputs and call.inputs[name].requires_grad]
            if wanting:
                raise ArgumentError(f"attention: 8-bit float (FP8) attention is forward-only, but "
                                    f"{', '.join(wanting)} require(s) grad; pass detached tensors or run under "
                                    "torch.no_grad()")
        return super().needs_autograd(call)


def _fp8_bad_cases() -> list[BadCase]:
    """FP8 arguments attention must reject."""
    e4m3, e5m2 = torch.float8_e4m3fn, torch.float8_e5m2

    def qkv(dtype: torch.dtype = e4m3, k_dtype: torch.dtype | None = None, **kw: Any):
        def make() -> tuple[tuple, dict]:
            q = torch.ones(2, 4, 5, 8).to(dtype)
            k = torch.ones(2, 2, 6, 8).to(k_dtype or dtype)
            return (q, k, torch.ones(2, 2, 6, 8).to(k_dtype or dtype)), kw
        return make
    return [
        BadCase("fp8-mixed-kinds", qkv(k_dtype=e5m2), DTypeError,
                "q is torch.float8_e4m3fn but k is torch.float8_e5m2; expected one dtype"),
        BadCase("fp8-out-float32", qkv(out_dtype=torch.float32), DTypeError,
                "out_dtype of 8-bit float inputs must be bfloat16 or float16, got torch.float32"),
        BadCase("fp8-out-not-dtype", qkv(out_dtype="bfloat16"), ArgumentError,
                "out_dtype must be a torch.dtype (torch.bfloat16 or torch.float16) or None, got str"),
        BadCase("fp8-descale-float16", qkv(q_descale=torch.ones(1, dtype=torch.float16)), DTypeError,
                "q_descale must be float32, got torch.float16"),
        BadCase("fp8-descale-q-heads", qkv(k_descale=torch.ones(2, 4)), ArgumentError,
                "k_descale must hold one element (per tensor) or be of shape (batch, kv_heads) = (2, 2) (per head), "
                "got shape (2, 4)"),
        BadCase("fp8-descale-device", qkv(v_descale=torch.ones(1, device="meta")), DeviceError,
                "q is on cpu but v_descale is on meta; expected one device"),
        BadCase("fp8-descale-not-tensor", qkv(q_descale=0.5), ArgumentError,
                "q_descale must be a float32 torch.Tensor or None, got float"),
        BadCase("descale-float16-inputs", qkv(torch.float16, q_descale=torch.ones(1)), ArgumentError,
                "q_descale dequantize 8-bit float inputs, but q, k, v are float16"),
        BadCase("out-dtype-float16-inputs", qkv(torch.float16, out_dtype=torch.bfloat16), ArgumentError,
                "out_dtype is for 8-bit float inputs (the output of float16 inputs is float16)"),
        BadCase("int8-dtype", qkv(torch.int8), DTypeError,
                "q must be float32, float16, bfloat16, float8_e4m3fn, float8_e5m2, got torch.int8"),
    ]
