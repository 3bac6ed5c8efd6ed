"""FP8 attention's spec side: the checks of the descale factors and out_dtype, the dequantized inputs (what an
FP8 call means), quantization for examples and cases, and the FP8 conformance cases.

An FP8 call takes float8_e4m3fn or float8_e5m2 q, k and v (one kind for all three) and, as FlashAttention-3
names them, ``q_descale``, ``k_descale``, ``v_descale``: float32 tensors of one element (per tensor) or of shape
(batch, kv_heads) (per head; q's head h takes kv head h // group's factor); None means 1. The call means
attention on the dequantized inputs q.float()·q_descale, k.float()·k_descale, v.float()·v_descale, its output in
``out_dtype`` (bfloat16 by default, or float16). Forward only.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from kernelzoo_plugins._flash.spec import check_qkv_mask, make_qkv, trivial_forward

from kernelzoo.errors import ArgumentError, DeviceError, DTypeError
from kernelzoo.registry import FLOATS, FP8, Call, check_same, check_tensor, dtype_name, parse_dtype, randn

DESCALES = ("q_descale", "k_descale", "v_descale")
OUT_DTYPES = (torch.bfloat16, torch.float16)
# the 8-bit float where a suite hands an FP8 case or an example another dtype
DEFAULT_FP8 = torch.float8_e4m3fn


def is_fp8(call: Call) -> bool:
    return "out_dtype" in call.params


def output_dtype(call: Call) -> torch.dtype:
    """o's dtype: out_dtype for FP8 inputs, else the inputs' own."""
    out = call.params.get("out_dtype")
    return parse_dtype(out) if out is not None else call.dtype


def check_qkv_mask_fp8(op: str, q: Any, k: Any, v: Any, causal: Any, scale: Any,
                       attn_mask: Any) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
    """check_qkv_mask for q, k, v of one 8-bit float: their kind and device checked here, the shapes, causal,
    scale and mask by check_qkv_mask on float32 stand-ins of their shapes (one element each, broadcast)."""
    for name, t in (("q", q), ("k", k), ("v", v)):
        check_tensor(op, name, t, FLOATS + FP8)
    check_same(op, q=q, k=k, v=v)
    one = torch.empty((), dtype=torch.float32, device=q.device)
    inputs, params = check_qkv_mask(op, *(one.expand(t.shape) for t in (q, k, v)), causal, scale, attn_mask)
    inputs.update(q=q, k=k, v=v)
    return inputs, params


def check_fp8(op: str, q: torch.Tensor, k: torch.Tensor, descales: dict[str, Any],
              out_dtype: Any) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
    """Validate the FP8 arguments of a call whose q, k, v passed the shared checks: (descale inputs, params)."""
    if q.dtype not in FP8:
        given = [name for name, t in descales.items() if t is not None]
        if given:
            raise ArgumentError(f"{op}: {', '.join(given)} dequantize 8-bit float inputs, but q, k, v are "
                                f"{dtype_name(q.dtype)}; expected float8_e4m3fn or float8_e5m2 inputs, or no descale")
        if out_dtype is not None and out_dtype != q.dtype:
            raise ArgumentError(f"{op}: out_dtype is for 8-bit float inputs (the output of {dtype_name(q.dtype)} "
                                f"inputs is {dtype_name(q.dtype)}), got out_dtype={out_dtype}")
        return {}, {}
    if out_dtype is None:
        out_dtype = torch.bfloat16
    if not isinstance(out_dtype, torch.dtype):
        raise ArgumentError(f"{op}: out_dtype must be a torch.dtype (torch.bfloat16 or torch.float16) or None, got "
                            f"{type(out_dtype).__name__}")
    if out_dtype not in OUT_DTYPES:
        raise DTypeError(f"{op}: out_dtype of 8-bit float inputs must be bfloat16 or float16, got {out_dtype}")
    batch, kv_heads = k.shape[0], k.shape[1]
    inputs, per_head = {}, False
    for name, t in descales.items():
        if t is None:
            continue
        if not isinstance(t, torch.Tensor):
            raise ArgumentError(f"{op}: {name} must be a float32 torch.Tensor or None, got {type(t).__name__}")
        if t.dtype != torch.float32:
            raise DTypeError(f"{op}: {name} must be float32, got {t.dtype}")
        if t.device != q.device:
            raise DeviceError(f"{op}: q is on {q.device} but {name} is on {t.device}; expected one device")
        if tuple(t.shape) == (batch, kv_heads):
            per_head = True
        elif t.numel() != 1:
            raise ArgumentError(f"{op}: {name} must hold one element (per tensor) or be of shape (batch, kv_heads) "
                                f"= ({batch}, {kv_heads}) (per head), got shape ({', '.join(map(str, t.shape))})")
        inputs[name] = t
    return inputs, {"out_dtype": dtype_name(out_dtype), "descale": "head" if per_head else "tensor"}


def trivial_output(call: Call) -> tuple[torch.Tensor, torch.Tensor] | None:
    """trivial_forward (a call with no work) with o in the call's output dtype."""
    done = trivial_forward(call)
    if done is None or not is_fp8(call):
        return done
    return done[0].to(output_dtype(call)), done[1]


def descale_views(call: Call) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """q_descale, k_descale, v_descale as float32 (batch, kv_heads) views: one element broadcast by stride 0, ones
    where a factor is absent."""
    k = call.inputs["k"]
    shape = (k.shape[0], k.shape[1])
    out = []
    for name in DESCALES:
        t = call.inputs.get(name)
        if t is None:
            t = torch.ones((), dtype=torch.float32, device=k.device)
        out.append(t if tuple(t.shape) == shape else t.reshape(()).expand(shape))
    return out[0], out[1], out[2]


def dequantized(call: Call, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """q·q_descale, k·k_descale, v·v_descale computed in ``dtype`` (q's heads take their kv head's factor)."""
    q, k, v = (call.inputs[name].to(dtype) for name in ("q", "k", "v"))
    qd, kd, vd = (t.to(dtype)[:, :, None, None] for t in descale_views(call))
    group = q.shape[1] // k.shape[1] if k.shape[1] else 1
    return q * qd.repeat_interleave(group, 1), k * kd, v * vd


def upcast(call: Call, dtype: torch.dtype = torch.float32) -> Call:
    """The call on its dequantized inputs (computed in float32, rounded to ``dtype``): what the plugins that
    compute in wider types run."""
    q, k, v = (t.to(dtype) for t in dequantized(call, torch.float32))
    inputs = {"q": q, "k": k, "v": v}
    if "attn_mask" in call.inputs:
        inputs["attn_mask"] = call.inputs["attn_mask"]
    return Call(call.op, inputs, {"causal": call.params["causal"], "scale": call.params["scale"]})


def quantize(x: torch.Tensor, dtype: torch.dtype, heads: tuple[int, int] | None) -> tuple[torch.Tensor, torch.Tensor]:
    """(x in the 8-bit float ``dtype``, float32 descale): the scale maps x's largest magnitude onto the dtype's
    largest finite value, for the whole (B, H, N, D) tensor, or per (batch, kv head) when ``heads`` = (B, Hk)
    (q's group of heads of one kv head shares a factor)."""
    largest = torch.finfo(dtype).max
    mag = x.detach().float().abs()
    if heads is None:
        amax = mag.amax() if x.numel() else mag.new_ones(())
        scale = (amax / largest).clamp(min=torch.finfo(torch.float32).tiny).reshape(1)
        return (x.float() / scale).clamp(-largest, largest).to(dtype), scale
    b, hk = heads
    grouped = mag.reshape(b, hk, -1)
    amax = grouped.amax(-1) if grouped.shape[-1] else mag.new_ones((b, hk))
    scale = (amax / largest).clamp(min=torch.finfo(torch.float32).tiny)
    per_head = scale.repeat_interleave(x.shape[1] // hk if hk else 1, 1)[:, :, None, None]
    return (x.float() / per_head).clamp(-largest, largest).to(dtype), scale.contiguous()


def quantized_inputs(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, dtype: torch.dtype,
                     descale: str) -> tuple[tuple[torch.Tensor, ...], dict[str, torch.Tensor]]:
    """(q, k, v) quantized to ``dtype`` with amax descales per tensor (``descale`` "tensor") or per (batch, kv
    head) ("head"), and the descale keywords."""
    heads = (k.shape[0], k.shape[1]) if descale == "head" else None
    out, kwargs = [], {}
    for name, x in (("q", q), ("k", k), ("v", v)):
        x8, scale = quantize(x, dtype, heads)
        out.append(x8)
        kwargs[f"{name}_descale"] = scale
    return tuple(out), kwargs


# --- conformance cases -------------------------------------------------------------------------

def fp8_of(spec: dict[str, Any]) -> Callable:
    """A case of the family's (spec.case_specs) for any dtype: for an 8-bit float its q, k, v drawn in it and an
    additive mask in bfloat16 (FP8's default out_dtype; an 8-bit mask could not hold -inf), the same draws as the
    16-bit case."""
    def make(device: torch.device, dtype: torch.dtype, g: torch.Generator) -> tuple[tuple, dict]:
        if dtype not in FP8:
            return make_qkv(spec, device, dtype, g)
        again = torch.Generator().set_state(g.get_state())
        qkv, kwargs = make_qkv(spec, device, dtype, g)
        if spec["mask"] and kwargs["attn_mask"].dtype != torch.bool:
            kwargs["attn_mask"] = make_qkv(spec, device, torch.bfloat16, again)[1]["attn_mask"]
        return qkv, kwargs
    return make


def fp8_case_specs() -> list[tuple[str, dict[str, Any], bool]]:
    """(id, spec, small) of the FP8 cases: per-tensor and per-head descales, data far from unit scale (q, k, v
    of standard deviations ``magnitudes``; q's times k's stays near 1, as attention's scores do), GQA, causal,
    odd lengths, head dims 64 and 128, float16 out, no descale at all. Sizes (B, Hq, Hk, Nq, Nk, D)."""
    def c(b: int, hq: int, hk: int, nq: int, nk: int, d: int, causal: bool = False, descale: str = "tensor",
          out: torch.dtype = torch.bfloat16, magnitudes: tuple[float, float, float] = (1.0, 1.0, 1.0),
          ) -> dict[str, Any]:
        return {"sizes": (b, hq, hk, nq, nk, d), "causal": causal, "descale": descale, "out": out,
                "magnitudes": magnitudes}
    return [
        ("fp8-n17", c(2, 2, 2, 17, 17, 64), True),
        ("fp8-head-n97-causal", c(2, 2, 2, 97, 97, 64, causal=True, descale="head"), True),
        ("fp8-head-gqa4-d128", c(2, 4, 1, 45, 45, 128, descale="head"), True),
        ("fp8-gqa2-causal-float16", c(1, 4, 2, 33, 61, 64, causal=True, out=torch.float16), True),
        ("fp8-head-d128-causal-far-scales", c(1, 2, 2, 65, 65, 128, causal=True, descale="head",
                                              magnitudes=(40.0, 1 / 40, 300.0)), True),
        ("fp8-small-values-nq61-nk17", c(1, 2, 2, 61, 17, 64, magnitudes=(1e-3, 1e-3, 1e-3)), True),
        ("fp8-no-descale-d80", c(1, 2, 2, 40, 40, 80, descale="none"), True),
        ("fp8-head-n1023-causal", c(1, 2, 2, 1023, 1023, 128, causal=True, descale="head"), False),
    ]


def fp8_case(spec: dict[str, Any]) -> Callable:
    def make(device: torch.device, dtype: torch.dtype, g: torch.Generator) -> tuple[tuple, dict]:
        kind = dtype if dtype in FP8 else DEFAULT_FP8
        b, hq, hk, nq, nk, d = spec["sizes"]
        q, k, v = (randn(shape, device, torch.float32, g, magnitude)
                   for shape, magnitude in zip(((b, hq, nq, d), (b, hk, nk, d), (b, hk, nk, d)), spec["magnitudes"]))
        kwargs: dict[str, Any] = {"causal": spec["causal"], "out_dtype": spec["out"]}
        if spec["descale"] == "none":
            return (q.to(kind), k.to(kind), v.to(kind)), kwargs
        qkv, descales = quantized_inputs(q, k, v, kind, spec["descale"])
        return qkv, {**kwargs, **descales}
    return make
