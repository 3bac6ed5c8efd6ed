"""FP8 attention: float8_e4m3fn / float8_e5m2 q, k, v with FlashAttention-3's descales and out_dtype. What a call
means (the dequantized inputs, per tensor or per kv head), the errors and autograd's refusal, the tuning key, the
cuda plugin's refusal, and the Triton kernel's two P·V precisions (in Triton's interpreter on the CPU, for real on
a GPU, where the sizes are the benchmarks' scale). The conformance suite runs every plugin on the FP8 cases."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from kernelzoo_plugins._flash.fp8 import dequantized, descale_views, quantized_inputs
from kernelzoo_plugins._flash.triton import has_tma
from kernelzoo_plugins.attention import triton as triton_module
from kernelzoo_plugins.attention.triton import keys_contiguous

import kernelzoo
from kernelzoo.autotune import plan_op
from kernelzoo.errors import ArgumentError, UnsupportedError
from kernelzoo.registry import registry
from kernelzoo.tuner.retime import flag_keywords

E4M3, E5M2 = torch.float8_e4m3fn, torch.float8_e5m2
OP = registry.op("attention")
GPU = torch.cuda.is_available()
DEVICE = "cuda" if GPU else "cpu"
gpu_only = pytest.mark.skipif(not GPU, reason="the Triton FP8 kernel runs for real on a CUDA GPU; none here")
# 8-bit floats' mantissa bits and the smallest normal exponent: how P rounds when P·V multiplies in FP8
P_FORMATS = {E4M3: (3, -6), E5M2: (2, -14)}


def quantized(b: int, hq: int, hk: int, n: int, d: int, kind: torch.dtype, descale: str, device: str = "cpu",
              seed: int = 0) -> tuple[tuple[torch.Tensor, ...], dict[str, torch.Tensor]]:
    g = torch.Generator().manual_seed(seed)
    q, k, v = (torch.randn(shape, generator=g).to(device) for shape in ((b, hq, n, d), (b, hk, n, d), (b, hk, n, d)))
    return quantized_inputs(q, k, v, kind, descale)


def triton_impl():
    impl = registry.impl("attention", "triton")
    availability = registry.availability(impl)
    if not availability:
        pytest.skip(availability.reason)
    return impl


# --- what a call means ----------------------------------------------------------------------------

@pytest.mark.parametrize("causal", [False, True])
def test_reference_is_sdpa_on_the_dequantized_inputs(causal: bool) -> None:
    """Per-head descales: q's head h takes kv head h // group's factor (GQA 4:2 here)."""
    (q, k, v), ds = quantized(2, 4, 2, 37, 64, E4M3, "head")
    call = OP.check(q, k, v, causal=causal, **ds)
    group = [t.double()[:, :, None, None] for t in (ds["q_descale"].repeat_interleave(2, 1), ds["k_descale"],
                                                     ds["v_descale"])]
    qf, kf, vf = (x.double() * s for x, s in zip((q, k, v), group))
    want = F.scaled_dot_product_attention(qf, kf, vf, is_causal=causal, enable_gqa=True)
    o, _ = OP.reference(call)
    torch.testing.assert_close(o, want, rtol=1e-12, atol=1e-12)


def test_descale_forms() -> None:
    """One element in any shape is per tensor; a missing descale is 1."""
    (q, k, v), _ = quantized(2, 2, 2, 9, 32, E5M2, "tensor")
    python = registry.impl("attention", "python")
    full = {name: torch.full((2, 2), 0.5) for name in ("q_descale", "k_descale", "v_descale")}
    a = python.run(OP.check(q, k, v, **full), {})[0]
    b = python.run(OP.check(q, k, v, q_descale=torch.tensor(0.5), k_descale=torch.tensor([0.5]),
                             v_descale=torch.tensor([[0.5]])), {})[0]
    assert torch.equal(a, b)
    ones = python.run(OP.check(q, k, v, k_descale=torch.ones(1)), {})[0]
    none = python.run(OP.check(q, k, v), {})[0]
    assert torch.equal(ones, none)
    views = descale_views(OP.check(q, k, v, q_descale=torch.tensor(0.25)))
    assert [tuple(t.shape) for t in views] == [(2, 2)] * 3 and views[0].stride() == (0, 0)
    assert float(views[0][1, 1]) == 0.25 and float(views[2][0, 1]) == 1.0


def test_out_dtype() -> None:
    (q, k, v), ds = quantized(1, 2, 2, 17, 32, E4M3, "tensor")
    assert kernelzoo.ops.attention(q, k, v, **ds).dtype == torch.bfloat16
    assert kernelzoo.ops.attention(q, k, v, **ds, out_dtype=torch.float16).dtype == torch.float16
    x = torch.randn(1, 2, 17, 32)
    assert torch.equal(kernelzoo.ops.attention(x, x, x, out_dtype=torch.float32), kernelzoo.ops.attention(x, x, x))
    assert "out_dtype" not in OP.check(x, x, x).params


def test_autograd_refused() -> None:
    """FP8 is forward-only: a call that would record a backward raises; without grad it runs."""
    (q, k, v), ds = quantized(1, 2, 2, 17, 32, E4M3, "head")
    with pytest.raises(ArgumentError, match=r"forward-only, but q require\(s\) grad"):
        kernelzoo.ops.attention(q.requires_grad_(), k, v, **ds)
    with pytest.raises(ArgumentError, match=r"forward-only, but k_descale require\(s\) grad"):
        kernelzoo.ops.attention(q.detach(), k, v, **{**ds, "k_descale": ds["k_descale"].requires_grad_()})
    with torch.no_grad():
        o = kernelzoo.ops.attention(q, k, v, **ds)
    assert not o.requires_grad


# --- tuning key ----------------------------------------------------------------------------------

def test_tuning_key_and_plan() -> None:
    call = OP.example((1, 2, 64, 64, 1), E4M3, "cpu", torch.Generator().manual_seed(0), descale="head",
                      out_dtype="float16")
    assert call.dtype == E4M3 and call.params["out_dtype"] == "float16" and call.inputs["q_descale"].shape == (1, 2)
    assert OP.flags(call) == "causal-out_dtype=float16"
    # descales change no kernel: per tensor and per head share a key
    per_tensor = OP.example((1, 2, 64, 64, 1), E4M3, "cpu", torch.Generator().manual_seed(0), out_dtype="float16")
    assert OP.flags(per_tensor) == OP.flags(call) and OP.bucket(per_tensor) == OP.bucket(call)
    rebuilt = OP.example((1, 2, 64, 64, 1), E4M3, "cpu", None, **flag_keywords(OP.flags(call)))
    assert OP.flags(rebuilt) == OP.flags(call)
    assert OP.flags(OP.example((1, 2, 64, 64, 0), E5M2, "cpu")) == ""  # bfloat16 out: the default
    jobs = plan_op("attention", "cpu", plugins=["python"], dtypes=["float8_e4m3fn"])
    assert jobs and {job.dtype for job in jobs} == {"float8_e4m3fn"}
    assert {job.dtype for job in plan_op("attention", "cpu", plugins=["python"])} == {"float32"}


# --- plugins -------------------------------------------------------------------------------------

def test_cuda_plugin_declares_no_fp8() -> None:
    """The cuda plugin has no FP8 kernel: it declares the half floats alone, so supports() refuses an FP8 call on
    a GPU (test_gpu_dispatch_runs_triton_and_cuda_refuses) and dispatch goes on to the triton plugin."""
    declared = registry.impl("attention", "cuda").dtypes
    assert set(declared) == {"cuda"} and not set(declared["cuda"]) & {E4M3, E5M2}


def test_keys_contiguous() -> None:
    """V's transpose is read in place where v is a transposed view of (B, H, D, N) memory, else copied with every
    stride a multiple of 16 bytes."""
    base = torch.randn(2, 3, 64, 48).to(E4M3)
    vt = keys_contiguous(base.transpose(2, 3))
    assert vt.data_ptr() == base.data_ptr() and torch.equal(vt.float(), base.float())
    v = torch.randn(2, 3, 37, 64).to(E4M3)
    vt = keys_contiguous(v)
    assert vt.shape == (2, 3, 64, 37) and vt.stride(-1) == 1 and all(s % 16 == 0 for s in vt.stride()[:-1])
    assert torch.equal(vt.float(), v.transpose(2, 3).float())


def test_triton_reads_a_transposed_v_view() -> None:
    impl = triton_impl()
    (q, k, v), ds = quantized(1, 2, 2, 48, 64, E5M2, "head", device=DEVICE)
    v_view = v.transpose(2, 3).contiguous().transpose(2, 3)  # (B, H, N, D) over (B, H, D, N) memory
    a = impl.run(OP.check(q, k, v, **ds), impl.config())
    b = impl.run(OP.check(q, k, v_view, **ds), impl.config())
    assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])


def test_triton_pv_fp8_needs_fp8_inputs() -> None:
    impl = triton_impl()
    x = torch.randn(1, 1, 8, 32, device=DEVICE, dtype=torch.float32 if DEVICE == "cpu" else torch.float16)
    with pytest.raises(UnsupportedError, match="PV_FP8 1 is for 8-bit float inputs"):
        impl.run(OP.check(x, x, x), impl.config({"PV_FP8": 1}))


def p_rounding_bound(call, kind: torch.dtype) -> torch.Tensor:
    """Per output, how far rounding P to the 8-bit float ``kind`` may move o: each unnormalised probability
    p_j ≤ 1 rounds by at most 2^-(mantissa+1)·p_j, or half the smallest subnormal step, and o = Σ p_j v_j / Σ p_j."""
    mantissa, min_exp = P_FORMATS[kind]
    q, k, v = dequantized(call, torch.float64)
    group = q.shape[1] // k.shape[1]
    kk, vv = k.repeat_interleave(group, 1), v.repeat_interleave(group, 1)
    scores = q @ kk.transpose(-1, -2) * call.params["scale"]
    if call.params["causal"]:
        n_q, n_k = scores.shape[-2:]
        scores = scores.masked_fill(torch.ones(n_q, n_k, dtype=torch.bool, device=q.device).triu(1), float("-inf"))
    p = torch.exp(scores - scores.amax(-1, keepdim=True))
    l = p.sum(-1, keepdim=True)  # noqa: E741
    step = 2.0 ** (min_exp - mantissa - 1)
    return (2.0 ** -(mantissa + 1) * (p @ vv.abs()) + step * vv.abs().sum(-2, keepdim=True)) / l


def check_pv_precisions(b: int, hq: int, hk: int, n: int, d: int, kind: torch.dtype, causal: bool) -> None:
    """PV_FP8 0 meets the op's tolerance; PV_FP8 1 stays within that plus how far rounding P to FP8 may move o."""
    impl = triton_impl()
    (q, k, v), ds = quantized(b, hq, hk, n, d, kind, "head", device=DEVICE, seed=n + d + int(causal))
    call = OP.check(q, k, v, causal=causal, **ds)
    ref = OP.reference(call)
    accurate = impl.run(call, impl.config({"PV_FP8": 0}))
    assert OP.verify(call, accurate, ref) is None
    fast = impl.run(call, impl.config({"PV_FP8": 1}))
    assert not torch.equal(fast[0], accurate[0])  # the knob changes the product
    assert OP.verify(call, (accurate[0], fast[1]), ref) is None  # the scores and lse are the same either way
    err = (fast[0].double() - ref[0]).abs()
    bound = p_rounding_bound(call, kind) + (accurate[0].double() - ref[0]).abs().max() + 2.0**-8 * ref[0].abs()
    over = float((err - bound).max())
    assert over <= 0, f"max error {float(err.max()):.3g}, over the bound by {over:.3g}"


@pytest.mark.filterwarnings("ignore::RuntimeWarning")  # the interpreter's numpy: log2(0), -inf - -inf
@pytest.mark.parametrize("kind", [E4M3, E5M2], ids=["e4m3", "e5m2"])
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("tma", [False, True], ids=["pointers", "descriptors"])
def test_triton_pv_precisions(kind: torch.dtype, causal: bool, tma: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    """Both ways to read q, k, Vᵀ and o: pointers, and TMA descriptors (forced in the interpreter)."""
    if not tma or not GPU:
        monkeypatch.setattr(triton_module, "descriptors_apply", lambda *tensors: tma)
    elif not has_tma(torch.device("cuda")):
        pytest.skip("this GPU has no TMA (sm_90 and newer have)")
    check_pv_precisions(1, 4, 2, 150, 64, kind, causal)


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
def test_pv_fp8_misses_the_tolerance() -> None:
    """Rounding P to e4m3 before P·V costs far more than out_dtype's rounding: at 400 keys the op's tolerance
    (2× the float32 math's error on the dequantized inputs, o rounded to bfloat16) rejects it, and tuning with it."""
    impl = triton_impl()
    (q, k, v), ds = quantized(1, 2, 2, 400, 64, E4M3, "head", device=DEVICE, seed=1)
    call = OP.check(q, k, v, **ds)
    mismatch = OP.verify(call, impl.run(call, impl.config({"PV_FP8": 1})), OP.reference(call))
    assert mismatch is not None and "o: max abs error" in mismatch.what


# --- on a GPU ------------------------------------------------------------------------------------

@gpu_only
@pytest.mark.parametrize("kind", [E4M3, E5M2], ids=["e4m3", "e5m2"])
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("kv_heads", [4, 2], ids=["mha", "gqa"])
def test_gpu_pv_precisions(kind: torch.dtype, causal: bool, kv_heads: int) -> None:
    check_pv_precisions(2, 4, kv_heads, 1000, 128, kind, causal)


@gpu_only
def test_gpu_dispatch_runs_triton_and_cuda_refuses() -> None:
    (q, k, v), ds = quantized(2, 4, 2, 1000, 128, E4M3, "head", device="cuda")
    call = OP.check(q, k, v, causal=True, **ds)
    assert kernelzoo.explain("attention", q, k, v, causal=True, **ds).plugin == "triton"
    o = kernelzoo.ops.attention(q, k, v, causal=True, **ds)
    ref = OP.reference(call)
    assert OP.verify(call, (o, ref[1].float()), ref) is None  # o alone is returned: lse is the reference's
    with kernelzoo.use("cuda"), pytest.raises(UnsupportedError, match="not float8_e4m3fn"):
        kernelzoo.ops.attention(q, k, v, **ds)
