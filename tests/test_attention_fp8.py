"""FP8 attention: float8_e4m3fn / float8_e5m2 q, k, v with FlashAttention-3's descales and out_dtype. What a call
means (the dequantized inputs, per tensor or per kv head), the errors and autograd's refusal, the tuning key, the
cuda plugin's FP8 kernel (its fit and layouts here; its results on an sm_90 GPU), and the Triton kernel's two P·V
precisions (in Triton's interpreter on the CPU, for real on a GPU, where the sizes are the benchmarks' scale). The
conformance suite runs every plugin on the FP8 cases."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from kernelzoo_plugins._flash import cuda as flash_cuda
from kernelzoo_plugins._flash.cuda import sm90
from kernelzoo_plugins._flash.fp8 import dequantized, descale_views, quantized_inputs
from kernelzoo_plugins._flash.triton import has_tma
from kernelzoo_plugins.attention import cuda as cuda_module
from kernelzoo_plugins.attention import triton as triton_module
from kernelzoo_plugins.attention.cuda import float16_pairs, spills_in_three_warpgroups
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

CUDA = registry.impl("attention", "cuda")
HOPPER_128 = CUDA.hopper_defaults[128][0]  # two consumer warpgroups, a producer warpgroup, FlashAttention-3's order


def fp8_call(d: int, kind: torch.dtype = E4M3, out: torch.dtype = torch.bfloat16):
    q = torch.zeros((1, 2, 33, d)).to(kind)
    return OP.check(q, q, q, out_dtype=out)


def test_cuda_plugin_fits_fp8_calls(monkeypatch: pytest.MonkeyPatch) -> None:
    """The cuda plugin declares both 8-bit floats. The warpgroup-MMA configs multiply Q·Kᵀ in them at head dim 128,
    their q and K tiles holding bytes (half the 16-bit tiles) and V tiles float16; other configs and head dims run
    float16 copies of q, k and v in the 16-bit tiles."""
    monkeypatch.setattr(flash_cuda, "shared_limit", lambda device: 227 * 1024)  # the H100's and H200's
    assert {E4M3, E5M2} <= set(CUDA.dtypes["cuda"])
    for d, overrides in ((64, {"WARPS": 8}), (80, {"WARPS": 8}), (128, {"WARPS": 8}),
                         (64, CUDA.hopper_defaults[64][0])):
        config = CUDA.config(overrides)
        assert CUDA.shared_memory(fp8_call(d), config) == CUDA.shared_memory(
            OP.check(*(torch.zeros((1, 2, 33, d), dtype=torch.float16),) * 3), config)
    call = fp8_call(128)
    config = CUDA.config({"WGMMA": 1, "WARPS": 8, "BLOCK_N": 128, "STAGES": 3})
    # q (128 rows) and 3 stages of K (128 keys), a byte a column, 3 of V, two; 1024 bytes to align them
    assert CUDA.shared_memory(call, config) == {"attention_forward": 1024 + 128 * (128 + 3 * 128) + 2 * 128 * 3 * 128}
    # o leaves through rows of 136 float16 from the q tile on: 192 rows need more than the tiles of 32-key stages
    wide = CUDA.config({"WGMMA": 1, "WARPS": 12, "BLOCK_M": 192, "BLOCK_N": 32, "STAGES": 2})
    assert CUDA.shared_memory(call, wide) == {"attention_forward": 1024 + 2 * 136 * 192}


def test_cuda_fp8_defines() -> None:
    """T is float16 (V's type, and q's and k's 16-bit views), QK_F8 the 8-bit kind, O_T o's type."""
    config = CUDA.config(HOPPER_128)
    assert CUDA.defines(E5M2, {**config, "out": "float16"}) == {**CUDA.defines(torch.float16, config),
                                                              "QK_F8": "kz_e5m2", "O_T": "kz_half"}
    assert CUDA.defines(E4M3, config)["O_T"] == "kz_bf16" and CUDA.defines(E4M3, config)["QK_F8"] == "kz_e4m3"


def test_cuda_fp8_default_fits_the_hopper_configs(monkeypatch: pytest.MonkeyPatch) -> None:
    """On an sm_90 device an FP8 call given the default runs the Hopper default of its head dim, as a 16-bit call
    does."""
    monkeypatch.setattr(cuda_module, "sm90", lambda device: True)
    monkeypatch.setattr(flash_cuda, "shared_limit", lambda device: 227 * 1024)
    assert CUDA.fitted(fp8_call(128), CUDA.config()) == CUDA.config(HOPPER_128)
    assert CUDA.fitted(fp8_call(64), CUDA.config()) == CUDA.config(CUDA.hopper_defaults[64][0])


def test_float16_pairs() -> None:
    """q and k reach the FP8 kernel as float16 views of their bytes (no copy where the rows are 16-byte aligned),
    else copied into rows padded to 16 bytes."""
    x = torch.randn(2, 5, 3, 128).to(E4M3)
    pairs = float16_pairs(x.transpose(1, 2))  # a projection's (B, N, H, D) layout: read in place
    assert pairs.shape == (2, 3, 5, 64) and pairs.data_ptr() == x.data_ptr()
    assert torch.equal(pairs.view(E4M3).float(), x.transpose(1, 2).float())
    odd = torch.randn(2, 3, 5, 120).to(E4M3)  # rows of 120 bytes: the kernel reads their last chunk whole
    pairs = float16_pairs(odd)
    assert pairs.shape == (2, 3, 5, 60) and pairs.stride()[:3] == (3 * 5 * 64, 5 * 64, 64)
    assert torch.equal(pairs.view(E4M3).float(), odd.float())
    padding = pairs.as_strided((2, 3, 5, 4), pairs.stride(), pairs.storage_offset() + 60)
    assert not padding.view(torch.uint8).any()
    wide = torch.randn(2, 3, 5, 136).to(E4M3)[..., :120]  # 120 bytes of 136-byte rows: the rest is not q's
    assert float16_pairs(wide).data_ptr() != wide.data_ptr()


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


SM90 = GPU and sm90(torch.device("cuda"))
sm90_only = pytest.mark.skipif(not SM90, reason="the cuda plugin's FP8 kernel runs on an sm_90 (Hopper) GPU; none here")


@gpu_only
@pytest.mark.parametrize("d", [64, 128])
def test_gpu_dispatch_runs_fp8(d: int) -> None:
    """The untuned order runs the cuda plugin first on a GPU: the 8-bit product at head dim 128 on sm_90, the
    16-bit one elsewhere."""
    (q, k, v), ds = quantized(2, 4, 2, 1000, d, E4M3, "head", device="cuda")
    call = OP.check(q, k, v, causal=True, **ds)
    assert kernelzoo.explain("attention", q, k, v, causal=True, **ds).plugin == "cuda"
    o = kernelzoo.ops.attention(q, k, v, causal=True, **ds)
    ref = OP.reference(call)
    assert OP.verify(call, (o, ref[1].float()), ref) is None  # o alone is returned: lse is the reference's


def cuda_fp8_configs() -> list[dict]:
    """The head dim 128 Hopper defaults and tuning seeds of the cuda plugin that take head dim 128, each once."""
    configs = []
    for overrides in (*CUDA.hopper_defaults[128], *CUDA.tuning_seeds):
        config = CUDA.config(overrides)
        if overrides.get("WGMMA") and config not in configs and not spills_in_three_warpgroups(config, 128, False):
            configs.append(config)
    return configs


@sm90_only
@pytest.mark.parametrize("config", cuda_fp8_configs(), ids=lambda c: "-".join(f"{k}{v}" for k, v in c.items()
                                                                                 if k != "Q_REGS"))
@pytest.mark.parametrize(("kind", "causal", "kv_heads", "descale", "out", "n", "d"), [
    (E4M3, False, 4, "head", torch.bfloat16, 1000, 128),
    (E4M3, True, 2, "tensor", torch.float16, 1000, 128),
    (E5M2, True, 4, "head", torch.bfloat16, 77, 128),
    (E4M3, False, 2, "head", torch.float16, 300, 120),  # 120-byte rows: copied into padded ones
], ids=["e4m3-mha", "e4m3-gqa-causal-tensor-fp16", "e5m2-n77-causal", "e4m3-d120"])
def test_gpu_cuda_fp8_meets_the_tolerance(config: dict, kind: torch.dtype, causal: bool, kv_heads: int,
                                          descale: str, out: torch.dtype, n: int, d: int) -> None:
    (q, k, v), ds = quantized(2, 4, kv_heads, n, d, kind, descale, device="cuda", seed=n + d + causal)
    call = OP.check(q, k, v, causal=causal, out_dtype=out, **ds)
    result = CUDA.run(call, config)
    assert result[0].dtype == out
    assert OP.verify(call, result, OP.reference(call)) is None
    # the same as the triton plugin's P·V with P in float16, to within their sums' order
    triton = registry.impl("attention", "triton").run(call, registry.impl("attention", "triton").config())
    torch.testing.assert_close(result[0].float(), triton[0].float(), atol=2e-2, rtol=2e-2)


@gpu_only
@pytest.mark.parametrize(("config", "d"), [
    *((c, d) for c in ({"Q_REGS": 0}, {"WARPS": 8}, {"WARPS": 4, "BLOCK_N": 32, "Q_REGS": 0}) for d in (64, 80, 128)),
    *(pytest.param(c, 64, marks=sm90_only) for c in CUDA.hopper_defaults[64])], ids=str)
def test_gpu_cuda_fp8_in_float16_products(config: dict, d: int) -> None:
    """The mma.sync configs run FP8 calls on float16 copies of q, k and v (any GPU, any head dim), and so do the
    warpgroup kernel's configs at head dim 64 (on sm_90)."""
    (q, k, v), ds = quantized(2, 4, 2, 333, d, E5M2, "head", device="cuda", seed=d)
    call = OP.check(q, k, v, causal=True, out_dtype=torch.float16, **ds)
    result = CUDA.run(call, CUDA.config(config))
    assert result[0].dtype == torch.float16
    assert OP.verify(call, result, OP.reference(call)) is None


@sm90_only
def test_gpu_cuda_fp8_masked_and_far_scales() -> None:
    """A bool attn_mask, and descales far from 1 (q's ×40, k's ×1/40, v's ×300), on the Hopper default."""
    g = torch.Generator().manual_seed(5)
    x = [torch.randn((1, 2, 200, 128), generator=g) * m for m in (40.0, 1 / 40, 300.0)]
    (q, k, v), ds = quantized_inputs(*(t.cuda() for t in x), E4M3, "head")
    mask = torch.rand((200, 200), generator=g).cuda() > 0.3
    call = OP.check(q, k, v, attn_mask=mask, **ds)
    assert OP.verify(call, CUDA.run(call, CUDA.config()), OP.reference(call)) is None
