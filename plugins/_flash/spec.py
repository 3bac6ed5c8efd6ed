"""The flash-attention family's spec side, shared by the ops attention and attention_backward: argument
checks, the tensor-op math (the reference, the python plugins and the verification baseline), the comparison
against float64, the shared Op base (sizes, buckets, flags, shapes, examples) and the conformance cases."""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Sequence
from typing import Any

import torch

from kernelzoo.errors import ArgumentError, DeviceError, DTypeError
from kernelzoo.registry import FLOATS, BadCase, Call, Op, check_same, check_tensor, randn
from kernelzoo.tolerance import Tolerance

MASK_DTYPES = (torch.bool, torch.float32, torch.float16, torch.bfloat16)
# Score elements one step of the tensor-op math holds (B·Hq·rows·Nk; the reference and the python plugin
# loop over row chunks, so that they stay in memory at N = 16384). On the CPU 128 MiB in float64. On a GPU
# 1 GiB in float64, or 1/32 of its memory if less: smaller steps (8 rows at B·H = 128, N = 16384) made the
# float64 reference several times slower there.
CHUNK_ELEMENTS = 1 << 24
GPU_CHUNK_ELEMENTS = 1 << 27
NEG_INF = float("-inf")


def shape_text(t: torch.Tensor) -> str:
    return "x".join(map(str, t.shape)) or "scalar"


# --- argument checks -------------------------------------------------------------------------

def check_qkv_mask(op: str, q: Any, k: Any, v: Any, causal: Any, scale: Any,
                   attn_mask: Any) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
    """Validate attention's arguments; the inputs (mask as a 4-D view) and the params."""
    # Nearly every call passes all of _check_qkv's checks: one test of the whole lets it through at a third of
    # the host time, and the checks that name what is wrong run only when it fails.
    if not _qkv_agree(q, k, v, causal):
        _check_qkv(op, q, k, v, causal)
    if scale is None:
        scale = 1.0 / math.sqrt(q.shape[3]) if q.shape[3] else 1.0
    elif isinstance(scale, bool) or not isinstance(scale, (int, float)) or not math.isfinite(scale):
        raise ArgumentError(f"{op}: scale must be a finite number or None, got {scale!r}")
    inputs = {"q": q, "k": k, "v": v}
    if attn_mask is not None:
        inputs["attn_mask"] = _check_mask(op, attn_mask, q, k)
    return inputs, {"causal": causal, "scale": float(scale)}


def _qkv_agree(q: Any, k: Any, v: Any, causal: Any) -> bool:
    """Whether _check_qkv would pass, for plain tensors (a subclass may answer shape or dtype otherwise: those
    take the checks)."""
    tensor = torch.Tensor
    if type(q) is not tensor or type(k) is not tensor or type(v) is not tensor or type(causal) is not bool:
        return False
    q_shape, k_shape = q.shape, k.shape
    dtype, device = q.dtype, q.device
    return (len(q_shape) == 4 and len(k_shape) == 4 and v.shape == k_shape and dtype in FLOATS
            and k.dtype is dtype and v.dtype is dtype and k.device == device and v.device == device
            and k_shape[0] == q_shape[0] and k_shape[3] == q_shape[3] and k_shape[1] != 0
            and q_shape[1] % k_shape[1] == 0)


def _check_qkv(op: str, q: Any, k: Any, v: Any, causal: Any) -> None:
    for name, t in (("q", q), ("k", k), ("v", v)):
        check_tensor(op, name, t)
        if t.dim() != 4:
            raise ArgumentError(f"{op}: {name} must be 4-D (batch, heads, seq, head_dim), "
                                f"got {t.dim()}-D of shape {shape_text(t)}")
    check_same(op, q=q, k=k, v=v)
    if k.shape != v.shape:
        raise ArgumentError(f"{op}: k of shape {shape_text(k)} and v of shape {shape_text(v)} must "
                            "have the same shape (batch, kv_heads, n_k, head_dim)")
    if k.shape[0] != q.shape[0]:
        raise ArgumentError(f"{op}: q has batch {q.shape[0]} but k has batch {k.shape[0]}; expected equal")
    if k.shape[3] != q.shape[3]:
        raise ArgumentError(f"{op}: q has head_dim {q.shape[3]} but k and v have head_dim {k.shape[3]}; "
                            "expected equal")
    if k.shape[1] == 0 or q.shape[1] % k.shape[1]:
        raise ArgumentError(f"{op}: q has {q.shape[1]} heads, which is not a multiple of k's "
                            f"{k.shape[1]} heads (grouped-query attention needs Hq = group · Hk)")
    if not isinstance(causal, bool):
        raise ArgumentError(f"{op}: causal must be a bool, got {causal!r}")


def _check_mask(op: str, mask: Any, q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
    if not isinstance(mask, torch.Tensor):
        raise ArgumentError(f"{op}: attn_mask must be a torch.Tensor or None, got {type(mask).__name__}")
    if mask.dtype not in MASK_DTYPES:
        raise DTypeError(f"{op}: attn_mask must be bool (True = attend) or float32, float16, bfloat16 "
                         f"(added to the scores), got {mask.dtype}")
    if mask.device != q.device:
        raise DeviceError(f"{op}: q is on {q.device} but attn_mask is on {mask.device}; expected one device")
    target = (q.shape[0], q.shape[1], q.shape[2], k.shape[2])
    try:
        fits = mask.dim() <= 4 and torch.broadcast_shapes(mask.shape, target) == target
    except RuntimeError:
        fits = False
    if not fits:
        raise ArgumentError(f"{op}: attn_mask of shape {shape_text(mask)} does not broadcast to "
                            f"(batch, heads, n_q, n_k) = {'x'.join(map(str, target))}")
    return mask[(None,) * (4 - mask.dim())]


# --- the math in tensor ops (reference, python plugin, verification baseline) ---------------

def _chunk_rows(q: torch.Tensor, n_k: int) -> int:
    """Query rows per step of the tensor-op math: CHUNK_ELEMENTS scores at most (on a GPU, GPU_CHUNK_ELEMENTS
    or as many as 1/32 of its memory holds in float64)."""
    elements = CHUNK_ELEMENTS
    if q.device.type == "cuda":
        elements = max(elements, min(GPU_CHUNK_ELEMENTS, torch.cuda.get_device_properties(q.device).total_memory >> 8))
    return max(1, elements // max(1, q.shape[0] * q.shape[1] * n_k))


def _scores(q_rows: torch.Tensor, k: torch.Tensor, attn_mask: torch.Tensor | None, causal: bool,
            scale: float, row0: int) -> torch.Tensor:
    """Scaled, masked scores of query rows row0.. of q_rows (B, Hk, G, rows, D) against
    k (B, Hk, 1, Nk, D): (B, Hk, G, rows, Nk), -inf where a key is not attended."""
    s = (q_rows @ k.transpose(-1, -2)) * scale
    rows, n_k = s.shape[-2:]
    if attn_mask is not None:
        m = attn_mask if attn_mask.shape[2] == 1 else attn_mask[:, :, row0:row0 + rows]
        m = m.unflatten(1, (k.shape[1], -1)) if m.shape[1] > 1 else m.unsqueeze(2)  # heads -> (Hk, G)
        s = s.masked_fill(~m, NEG_INF) if m.dtype == torch.bool else s + m.to(s.dtype)
    if causal:
        i = torch.arange(row0, row0 + rows, device=s.device)[:, None]
        j = torch.arange(n_k, device=s.device)[None, :]
        s = s.masked_fill(j > i, NEG_INF)
    return s


def _softmax_rows(s: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(exp(s - m), l = Σ exp(s - m), m) per row, with m = 0 where a row has no finite score so
    that such rows give p = 0, l = 0. m is detached: softmax does not depend on it."""
    m = s.amax(-1, keepdim=True).detach()
    m = torch.where(m == NEG_INF, torch.zeros_like(m), m)
    p = torch.exp(s - m)
    return p, p.sum(-1, keepdim=True), m


def _grouped(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, dtype: torch.dtype) -> tuple:
    """q as (B, Hk, G, Nq, D), k and v as (B, Hk, 1, Nk, D), all in ``dtype``."""
    hk = k.shape[1]
    return q.to(dtype).unflatten(1, (hk, -1)), k.to(dtype).unsqueeze(2), v.to(dtype).unsqueeze(2)


def attention_math(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, attn_mask: torch.Tensor | None,
                   causal: bool, scale: float, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """(o, lse) by softmax(q·kᵀ·scale + mask)·v in tensor ops computed in ``dtype``, materialising
    the scores of a chunk of query rows at a time; o in ``dtype`` (B, Hq, Nq, D), lse (B, Hq, Nq)."""
    batch, heads, n_q, d = q.shape
    o = torch.zeros((batch, heads, n_q, d), dtype=dtype, device=q.device)
    lse = torch.full((batch, heads, n_q), NEG_INF, dtype=dtype, device=q.device)
    if k.shape[2] == 0:
        return o, lse
    qg, kg, vg = _grouped(q, k, v, dtype)
    step = _chunk_rows(q, k.shape[2])
    for r0 in range(0, n_q, step):
        s = _scores(qg[..., r0:r0 + step, :], kg, attn_mask, causal, scale, r0)
        p, row_sum, m = _softmax_rows(s)
        rows = s.shape[-2]
        o[:, :, r0:r0 + rows] = ((p @ vg) / torch.where(row_sum == 0, 1.0, row_sum)).flatten(1, 2)
        lse[:, :, r0:r0 + rows] = (m + torch.log(row_sum)).squeeze(-1).flatten(1, 2)
    return o, lse


def log_sum_exp(q: torch.Tensor, k: torch.Tensor, attn_mask: torch.Tensor | None, causal: bool,
                scale: float, dtype: torch.dtype) -> torch.Tensor:
    """lse alone (B, Hq, Nq) in ``dtype``, for kernels that do not return it; -inf for empty rows."""
    lse = torch.full(q.shape[:3], NEG_INF, dtype=dtype, device=q.device)
    if k.shape[2] == 0:
        return lse
    qg, kg, _ = _grouped(q, k, k[:, :, :0], dtype)
    step = _chunk_rows(q, k.shape[2])
    for r0 in range(0, q.shape[2], step):
        s = _scores(qg[..., r0:r0 + step, :], kg, attn_mask, causal, scale, r0)
        lse[:, :, r0:r0 + s.shape[-2]] = torch.logsumexp(s, -1).flatten(1, 2)
    return lse


def attention_backward_math(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, do: torch.Tensor,
                            attn_mask: torch.Tensor | None, causal: bool, scale: float, dtype: torch.dtype,
                            o: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(dq, dk, dv) in ``dtype`` by the textbook formulas: P = softmax(S), dP = dO·Vᵀ,
    dS = P∘(dP − rowsum(dO∘O)), dQ = dS·K·scale, dK = dSᵀ·Q·scale, dV = Pᵀ·dO (dK, dV summed over
    each group of query heads). rowsum(dO∘O) uses ``o`` when given (as the kernels do), else the
    equal rowsum(P∘dP) of the recomputed P."""
    hk = k.shape[1]
    dq = torch.zeros(q.shape, dtype=dtype, device=q.device)
    dk = torch.zeros(k.shape, dtype=dtype, device=q.device)
    dv = torch.zeros(v.shape, dtype=dtype, device=q.device)
    if k.shape[2] == 0:
        return dq, dk, dv
    qg, kg, vg = _grouped(q, k, v, dtype)
    dog = do.to(dtype).unflatten(1, (hk, -1))
    step = _chunk_rows(q, k.shape[2])
    for r0 in range(0, q.shape[2], step):
        q_rows, do_rows = qg[..., r0:r0 + step, :], dog[..., r0:r0 + step, :]
        p, row_sum, _ = _softmax_rows(_scores(q_rows, kg, attn_mask, causal, scale, r0))
        p = p / torch.where(row_sum == 0, 1.0, row_sum)
        dp = do_rows @ vg.transpose(-1, -2)
        if o is None:
            delta = (p * dp).sum(-1, keepdim=True)
        else:
            delta = (do_rows * o.to(dtype).unflatten(1, (hk, -1))[..., r0:r0 + step, :]).sum(-1, keepdim=True)
        ds = p * (dp - delta)
        rows = ds.shape[-2]
        dq[:, :, r0:r0 + rows] = ((ds @ kg) * scale).flatten(1, 2)
        dk += ((ds.transpose(-1, -2) @ q_rows) * scale).sum(2)
        dv += (p.transpose(-1, -2) @ do_rows).sum(2)
    return dq, dk, dv


# --- helpers for implementations -------------------------------------------------------------

def like(call: Call, t: torch.Tensor, dtype: torch.dtype | None = None) -> torch.Tensor:
    """A new output of t's shape on the call's device: in (B, N, H, D) memory order when t's rows
    lie further apart than its heads (the layout a projection gives, alone or packed with others,
    so that o.transpose(1, 2).reshape(B, N, H·D) stays a view), else contiguous."""
    b, h, n, d = t.shape
    if h > 1 and n > 1 and t.stride(2) > t.stride(1):
        return call.empty((b, n, h, d), dtype).transpose(1, 2)
    return call.empty((b, h, n, d), dtype)


def trivial_forward(call: Call) -> tuple[torch.Tensor, torch.Tensor] | None:
    """(o, lse) of a call with no work (an empty dimension, or no key: o = 0, lse = -inf), else None."""
    q, k = call.inputs["q"], call.inputs["k"]
    if q.numel() and k.shape[2]:
        return None
    lse = call.empty(q.shape[:3], torch.float32).fill_(NEG_INF)
    return like(call, q).zero_(), lse


def dead_rows(attn_mask: torch.Tensor | None, causal: bool, n_q: int, n_k: int) -> torch.Tensor | None:
    """Where a query row attends no key: bool broadcastable to (B, Hq, Nq, 1), None without a mask
    (causal masking alone never empties a row: key 0 is always seen; with a mask it can)."""
    if attn_mask is None:
        return None
    keep = attn_mask if attn_mask.dtype == torch.bool else attn_mask != NEG_INF
    if causal:
        keep = keep & _causal_keep(n_q, n_k, attn_mask.device)
    return ~keep.any(-1, keepdim=True)


def _causal_keep(n_q: int, n_k: int, device: torch.device) -> torch.Tensor:
    return torch.arange(n_k, device=device)[None, :] <= torch.arange(n_q, device=device)[:, None]


def sdpa_mask(attn_mask: torch.Tensor, causal: bool, n_q: int, n_k: int,
              dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """(mask, dead) for torch's SDPA, which takes a mask or is_causal but not both: causal folded
    into the mask, and the rows that attend no key (``dead``, as from dead_rows) opened to every key
    so that no kernel of torch's meets an empty row (some give NaN there); the caller zeroes those
    rows' outputs and gradients."""
    if causal:
        keep = _causal_keep(n_q, n_k, attn_mask.device)
        attn_mask = attn_mask & keep if attn_mask.dtype == torch.bool else attn_mask.masked_fill(~keep, NEG_INF)
    dead = dead_rows(attn_mask, False, n_q, n_k)
    if attn_mask.dtype == torch.bool:
        return attn_mask | dead, dead
    return torch.where(dead, torch.zeros((), dtype=dtype, device=dead.device), attn_mask.to(dtype)), dead


def aligned(t: torch.Tensor) -> torch.Tensor:
    """t with a contiguous last dim on a 16-byte boundary, as torch's attention kernels need (their
    CPU kernel silently misreads other strides; the CUDA ones load 16 bytes at a time)."""
    return t if t.stride(-1) == 1 and t.data_ptr() % 16 == 0 else t.clone(memory_format=torch.contiguous_format)


def flash_applies(call: Call) -> bool:
    """Whether torch's FlashAttention-2 ops (``aten._scaled_dot_product_flash_attention`` and its
    backward) compute this call as the op defines it: CUDA, half types, no mask, head dims that are
    multiples of 8 up to 256, and causal only when Nq = Nk (its causal mask aligns bottom-right)."""
    q, k = call.inputs["q"], call.inputs["k"]
    return (q.is_cuda and q.dtype in (torch.float16, torch.bfloat16) and "attn_mask" not in call.inputs
            and q.shape[3] % 8 == 0 and q.shape[3] <= 256
            and not (call.params["causal"] and q.shape[2] != k.shape[2])
            and _flash_device(q.device.index))


@functools.cache
def _flash_device(index: int | None) -> bool:
    """Whether torch's FlashAttention-2 ops exist and run on CUDA device ``index`` (sm_80 and newer); asked
    once per device, as every call of the torch plugins on a GPU asks it."""
    return (torch.cuda.get_device_capability(index) >= (8, 0)
            and hasattr(torch.ops.aten, "_scaled_dot_product_flash_attention_backward"))


def additive_mask(attn_mask: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """The mask as an additive float tensor of its own (broadcast) shape: 0 / -inf for a bool mask."""
    if attn_mask.dtype == torch.bool:
        zero = torch.zeros((), dtype=dtype, device=attn_mask.device)
        return torch.where(attn_mask, zero, torch.full_like(zero, NEG_INF))
    return attn_mask.to(dtype)


# --- verification ----------------------------------------------------------------------------

def _max_abs(t: torch.Tensor) -> float:
    finite = t[torch.isfinite(t)]
    return float(finite.abs().max()) if finite.numel() else 0.0


def compare(name: str, out: torch.Tensor, ref: torch.Tensor, baseline: torch.Tensor, atol: float) -> str | None:
    """FlashAttention's rule: max|out − ref| ≤ 2·max|baseline − ref| + atol, where baseline is the
    same math done in the input precision; infinities and NaN must sit where the reference's do."""
    if out.shape != ref.shape:
        return f"{name}: shape {tuple(out.shape)}, expected {tuple(ref.shape)}"
    if out.numel() == 0:
        return None
    # on the reference's device: float64 copies of three 268M-element tensors (B=4, H=32, N=16384, D=128) to
    # the host made a tuning trial's verify() take tens of seconds
    got, want, base = (t.detach().to(ref.device, torch.float64) for t in (out, ref, baseline))
    if not torch.equal(torch.isnan(got), torch.isnan(want)):
        return f"{name}: {int((torch.isnan(got) != torch.isnan(want)).sum())} element(s) NaN where the reference is not"
    inf = torch.isinf(want)
    if not torch.equal(torch.isinf(got), inf) or not torch.equal(got[inf], want[inf]):
        return f"{name}: infinities differ from the reference"
    finite = torch.isfinite(want)
    diff = torch.where(finite, got - want, 0.0).abs()
    err = float(diff.max()) if bool(finite.any()) else 0.0
    base_err = float((base - want)[finite].abs().max()) if bool(finite.any()) else 0.0
    if math.isnan(base_err):  # the input-precision math overflowed: judge by atol alone
        base_err = 0.0
    allowed = 2.0 * base_err + atol
    if err > allowed:
        worst = tuple(int(i) for i in torch.unravel_index(diff.argmax(), diff.shape))
        return (f"{name}: max abs error {err:.3g} > allowed {allowed:.3g} (2 × {base_err:.3g} of the same "
                f"math in the input precision + {atol:.3g}); {int((diff > allowed).sum())} of {diff.numel()} "
                f"elements over, the worst at {worst}: {float(got[worst]):.6g}, expected {float(want[worst]):.6g}")
    return None


def output_atol(dtype: torch.dtype, ref: torch.Tensor) -> float:
    """The absolute term of the rule for o and the gradients: 1e-5 (float32, outputs of order 1) or
    1e-3·max(1, max|ref|) (float16 / bfloat16: a few units of fp16's 4.9e-4 rounding of values of order 1;
    not less, since a gradient that is exactly 0 in float64 (one attended key) is rounding noise in 16 bits)."""
    return (1e-5 if dtype == torch.float32 else 1e-3) * max(1.0, _max_abs(ref))


def lse_atol(dtype: torch.dtype) -> float:
    """lse's absolute term: its values are of order log(Nk) + max score (~10); 1e-4 covers float32
    rounding of the Nk-term sum (~sqrt(Nk)·6e-8 relative), 1e-2 the half-precision scores."""
    return 1e-4 if dtype == torch.float32 else 1e-2


# --- the spec --------------------------------------------------------------------------------

class AttentionSpecBase(Op):
    """What attention and attention_backward share: sizes, buckets, flags, shapes, examples."""

    # (B, H, N, D, causal); every GPU one moves more than the 50 MB L2 holds
    shapes = {
        "cuda": [(b, 32, n, d, c) for d in (64, 128) for b, n in ((4, 1024), (4, 4096), (1, 16384))
                 for c in (0, 1)],
        "cpu": [(1, 8, 1024, 64, 0), (1, 8, 1024, 64, 1), (1, 8, 512, 64, 0), (1, 4, 256, 64, 1)],
    }

    # A GPU tunes the half floats unless asked (--dtype float32): float32 attention kernels compile for
    # minutes each (Triton's IEEE products at D = 128), while the half floats' 24 keys of the forward take
    # minutes in all (docs/tuning.md).
    tune_dtypes = {"cuda": (torch.float16, torch.bfloat16)}

    # On a GPU the cuda plugin first, for keys nothing is tuned for and for tuned winners within noise of each
    # other: untuned, cuda ran ahead of Triton at the largest shapes, and tuned at most of them
    # (docs/design/flash-attention.md, docs/perf/attention-sdpa.md).
    default_order = {"cuda": ("cuda",)}

    def sizes(self, call: Call) -> dict[str, int]:
        (b, hq, n_q, d), (_, hk, n_k, _) = call.inputs["q"].shape, call.inputs["k"].shape
        return {"batch": b, "heads": hq, "kv_heads": hk, "n_q": n_q, "n_k": n_k, "d": d}

    def bucket(self, call: Call) -> tuple[int, ...]:
        # The kernels parallelise over batch·heads (only the product matters), specialise on the
        # head dim (kept exact) and loop over Nq and Nk; the GQA group is a flag.
        s = self.sizes(call)
        def log2(n: int) -> int:
            return 0 if n <= 1 else round(math.log2(n))
        return (log2(s["batch"] * s["heads"]), log2(s["n_q"]), log2(s["n_k"]), s["d"])

    def describe_bucket(self, call: Call, bucket: Sequence[int]) -> str:
        batch_heads, n_q, n_k, d = bucket
        return f"batch·heads=2^{batch_heads}, n_q=2^{n_q}, n_k=2^{n_k}, d={d}"

    def flags(self, call: Call) -> str:
        s = self.sizes(call)
        names = [("causal", call.params["causal"]), ("mask", "attn_mask" in call.inputs),
                 ("gqa", s["heads"] != s["kv_heads"])]
        return "-".join(name for name, on in names if on)

    def shape_string(self, call: Call) -> str:
        s = self.sizes(call)
        heads = f"{s['heads']}" if s["heads"] == s["kv_heads"] else f"{s['heads']}:{s['kv_heads']}"
        seq = f"{s['n_q']}" if s["n_q"] == s["n_k"] else f"{s['n_q']}:{s['n_k']}"
        return f"{s['batch']}x{heads}x{seq}x{s['d']}"

    def tolerance(self, call: Call) -> Tolerance:
        # For check_close users that look at the first output alone (the demo); verify() is the rule.
        # Measured over the conformance cases: float32 plugins' errors of o reach 1.3e-6 and of dq
        # 6e-6 (outputs of order 1-10); the float16 / bfloat16 tensor-op math 2.6e-3 / 1.8e-2.
        return {torch.float32: Tolerance(1e-5, 1e-5), torch.float16: Tolerance(5e-3, 5e-3),
                torch.bfloat16: Tolerance(4e-2, 4e-2)}[call.dtype]

    def forward_flops(self, call: Call) -> float:
        s = self.sizes(call)
        flops = 4.0 * s["batch"] * s["heads"] * s["n_q"] * s["n_k"] * s["d"]
        return flops / 2 if call.params["causal"] else flops

    def example_inputs(self, shape: Sequence[int], dtype: torch.dtype, device: torch.device | str,
                       generator: torch.Generator | None, params: dict[str, Any]) -> tuple[tuple, dict]:
        """Random q, k, v for ``shape`` (B, H, N, D[, causal]) and the keywords of the call."""
        batch, heads, n, d, *rest = shape
        kv_heads, n_k = params.pop("kv_heads", heads), params.pop("n_k", n)
        kwargs = {"causal": bool(rest[0]) if rest else False, **params}
        return (randn((batch, heads, n, d), device, dtype, generator),
                randn((batch, kv_heads, n_k, d), device, dtype, generator),
                randn((batch, kv_heads, n_k, d), device, dtype, generator)), kwargs


# --- conformance cases -----------------------------------------------------------------------

# One case: sizes (B, Hq, Hk, Nq, Nk, D), causal, a mask kind, a layout, the scale.
CaseSpec = dict[str, Any]


def case_specs() -> list[tuple[str, CaseSpec, bool]]:
    """(id, spec, small) for both ops: odd lengths (1, 17, 97 < any block; 1023, 1025 straddle them),
    Nq ≠ Nk both ways with causal, every head dim class, GQA 8:1, masks with rows that see no key,
    and views with the (B, N, H, D) memory order a projection gives. B and H stay small (2 cores)."""
    def c(b: int, hq: int, hk: int, nq: int, nk: int, d: int, causal: bool = False, mask: str = "",
          layout: str = "", scale: float | None = None) -> CaseSpec:
        return {"sizes": (b, hq, hk, nq, nk, d), "causal": causal, "mask": mask, "layout": layout,
                "scale": scale}
    return [
        ("n1", c(1, 2, 2, 1, 1, 64), True),
        ("n17", c(2, 2, 2, 17, 17, 64), True),
        ("n97-causal", c(1, 2, 2, 97, 97, 64, causal=True), True),
        ("n1023", c(1, 1, 1, 1023, 1023, 64), False),
        ("n1025-causal", c(1, 1, 1, 1025, 1025, 64, causal=True), False),
        ("nq17-nk97-causal", c(1, 2, 2, 17, 97, 64, causal=True), True),
        ("nq97-nk17-causal", c(1, 2, 2, 97, 17, 64, causal=True), True),
        ("nq1-nk77-causal", c(1, 2, 2, 1, 77, 64, causal=True), True),
        ("d16", c(1, 2, 2, 33, 33, 16), True),
        ("d80", c(1, 2, 2, 40, 40, 80, causal=True), True),
        ("d96", c(1, 2, 2, 33, 33, 96), True),
        ("d128", c(1, 2, 2, 65, 65, 128, causal=True), True),
        ("d256", c(1, 1, 1, 33, 33, 256), True),
        ("d24-scale", c(1, 2, 2, 20, 20, 24, scale=0.5), True),
        ("gqa8", c(1, 8, 1, 40, 40, 64), True),
        ("padding-mask", c(2, 2, 2, 33, 45, 64, mask="padding"), True),
        ("row-mask-causal", c(1, 2, 2, 37, 37, 64, causal=True, mask="rows"), True),
        ("additive-mask", c(1, 2, 2, 29, 41, 64, mask="additive"), True),
        ("additive-head-mask-gqa", c(1, 4, 2, 21, 21, 32, mask="additive-heads"), True),
        ("padding-mask-1025", c(1, 1, 1, 1025, 1023, 64, mask="padding"), False),
        ("bnhd", c(2, 3, 3, 19, 19, 64, layout="bnhd"), True),
        ("bnhd-gqa4-causal", c(2, 4, 1, 33, 49, 32, causal=True, layout="bnhd"), True),
        ("sliced", c(1, 2, 2, 23, 23, 32, layout="sliced"), True),
        ("packed-qkv-causal", c(2, 3, 3, 21, 21, 64, causal=True, layout="packed"), True),
        ("empty-nq0", c(1, 2, 2, 0, 5, 32), True),
        ("empty-nk0", c(1, 2, 2, 5, 0, 32), True),
        ("empty-batch0", c(0, 2, 2, 5, 5, 32), True),
    ]


def make_qkv(spec: CaseSpec, device: torch.device, dtype: torch.dtype,
             g: torch.Generator) -> tuple[tuple[torch.Tensor, ...], dict[str, Any]]:
    """The case's q, k, v (in its layout) and keywords (causal, scale, attn_mask)."""
    b, hq, hk, nq, nk, d = spec["sizes"]
    if spec["layout"] == "packed":  # self-attention's fused in-projection: (B, N, 3·H·D) viewed as (B, N, 3, H, D)
        packed = randn((b, nq, 3, hq, d), device, dtype, g)
        qkv = tuple(packed[:, :, i].transpose(1, 2) for i in range(3))
    else:
        qkv = tuple(case_tensor((b, h, n, d), spec["layout"], device, dtype, g)
                    for h, n in ((hq, nq), (hk, nk), (hk, nk)))
    kwargs: dict[str, Any] = {"causal": spec["causal"], "scale": spec["scale"]}
    if spec["mask"]:
        kwargs["attn_mask"] = _mask(spec["mask"], b, hq, nq, nk, device, dtype, g)
    return qkv, kwargs


def case_tensor(shape: Sequence[int], layout: str, device: torch.device, dtype: torch.dtype,
            g: torch.Generator) -> torch.Tensor:
    b, h, n, d = shape
    if layout == "bnhd":  # what (B, N, H·D) projections give after .view(B, N, H, D).transpose(1, 2)
        return randn((b, n, h, d), device, dtype, g).transpose(1, 2)
    if layout == "sliced":  # every other row and every other head dim: no dimension is contiguous
        return randn((b, h, 2 * n, 2 * d), device, dtype, g)[:, :, ::2, 1::2]
    return randn(shape, device, dtype, g)


def _mask(kind: str, b: int, hq: int, nq: int, nk: int, device: torch.device, dtype: torch.dtype,
          g: torch.Generator) -> torch.Tensor:
    if kind == "padding":  # key padding (B, 1, 1, Nk): batch 0 keeps its first 7 keys, batch 1 none
        keep = torch.arange(nk)[None, :] < torch.tensor([7, 0][:b] + [nk] * max(0, b - 2))[:, None]
        return keep[:, None, None, :].to(device)
    if kind == "rows":  # (Nq, Nk) bool: rows 3 and 10 see nothing, the others a random 70%
        keep = torch.rand((nq, nk), generator=g) < 0.7
        keep[[3, 10]] = False
        return keep.to(device)
    heads = hq if kind == "additive-heads" else 1
    bias = torch.randn((1, heads, nq, nk), generator=g)
    bias[torch.rand(bias.shape, generator=g) < 0.2] = NEG_INF
    bias[:, :, 4] = NEG_INF  # a row that sees nothing
    return bias.to(device, torch.float32 if dtype == torch.float32 else dtype)


def forward_case(spec: CaseSpec) -> Callable:
    def make(device: torch.device, dtype: torch.dtype, g: torch.Generator) -> tuple[tuple, dict]:
        return make_qkv(spec, device, dtype, g)
    return make


def bad_cases(op: str, extra: Callable[[tuple], tuple] = lambda args: args) -> list[BadCase]:
    """Arguments attention must reject; ``extra`` appends the backward's further inputs."""
    def qkv(qs=(1, 2, 5, 8), ks=(1, 2, 6, 8), vs=None, **kw: Any) -> Callable[[], tuple[tuple, dict]]:
        def make() -> tuple[tuple, dict]:
            kwargs = dict(kw)
            q = torch.ones(qs, dtype=kwargs.pop("q_dtype", torch.float32), device=kwargs.pop("q_device", "cpu"))
            return extra((q, torch.ones(ks), torch.ones(vs or ks))), kwargs
        return make
    return [
        BadCase("head-dim-mismatch", qkv(ks=(1, 2, 6, 16)), ArgumentError,
                "q has head_dim 8 but k and v have head_dim 16"),
        BadCase("kv-shape-mismatch", qkv(vs=(1, 2, 7, 8)), ArgumentError,
                "k of shape 1x2x6x8 and v of shape 1x2x7x8 must have the same shape"),
        BadCase("heads-not-multiple", qkv(qs=(1, 3, 5, 8)), ArgumentError,
                "q has 3 heads, which is not a multiple of k's 2 heads"),
        BadCase("batch-mismatch", qkv(qs=(2, 2, 5, 8)), ArgumentError, "q has batch 2 but k has batch 1"),
        BadCase("rank-3", qkv(qs=(2, 5, 8)), ArgumentError, "q must be 4-D (batch, heads, seq, head_dim), got 3-D"),
        BadCase("mask-shape", qkv(attn_mask=torch.ones(1, 1, 5, 7, dtype=torch.bool)), ArgumentError,
                "attn_mask of shape 1x1x5x7 does not broadcast to (batch, heads, n_q, n_k) = 1x2x5x6"),
        BadCase("mask-rank-5", qkv(attn_mask=torch.ones(1, 1, 1, 5, 6, dtype=torch.bool)), ArgumentError,
                "attn_mask of shape 1x1x1x5x6 does not broadcast"),
        BadCase("mask-int", qkv(attn_mask=torch.ones(5, 6, dtype=torch.int64)), DTypeError,
                "attn_mask must be bool (True = attend) or float32, float16, bfloat16"),
        BadCase("mask-device", qkv(attn_mask=torch.ones(5, 6, dtype=torch.bool, device="meta")), DeviceError,
                "q is on cpu but attn_mask is on meta"),
        BadCase("dtype-mismatch", qkv(q_dtype=torch.float16), DTypeError,
                "q is torch.float16 but k is torch.float32; expected one dtype"),
        BadCase("device-mismatch", qkv(q_device="meta"), DeviceError, "q is on meta but k is on cpu"),
        BadCase("int-dtype", lambda: (extra((torch.ones(1, 1, 2, 4, dtype=torch.int64),) * 3), {}), DTypeError,
                "q must be float32, float16, bfloat16, got torch.int64"),
        BadCase("not-a-tensor", lambda: (extra(([[1.0]], torch.ones(1, 1, 1, 1), torch.ones(1, 1, 1, 1))), {}),
                ArgumentError, "q must be a torch.Tensor, got list"),
        BadCase("causal-not-bool", qkv(causal=1), ArgumentError, "causal must be a bool, got 1"),
        BadCase("scale-nan", qkv(scale=float("nan")), ArgumentError, "scale must be a finite number or None"),
    ]
