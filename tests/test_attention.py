"""attention beyond the conformance cases: autograd through kernelzoo.ops.attention on every plugin
against torch.autograd on the float64 reference, rows that attend no key (0, never NaN), lse's
values, torch's causal convention when Nq ≠ Nk, and the spec's shapes, flags and errors."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from kernelzoo_plugins._flash.spec import attention_math, compare, output_atol

import kernelzoo
from kernelzoo.backends import triton as triton_backend
from kernelzoo.backends.openmp import avx512
from kernelzoo.errors import ArgumentError
from kernelzoo.registry import registry

_PLUGINS = ["python", "torch", "openmp"] + (["triton"] if triton_backend.interpreting() else [])

# (B, Hq, Hk, Nq, Nk, D, causal, mask kind, layout): small enough for Triton's interpreter
_SHAPES = {
    "b2-n37-d32": (2, 2, 2, 37, 37, 32, False, None, "bhnd"),
    "causal-nq20-nk45": (1, 2, 2, 20, 45, 32, True, None, "bhnd"),
    "causal-nq45-nk20-d80": (1, 2, 2, 45, 20, 80, True, None, "bhnd"),
    "gqa4-padding": (2, 4, 1, 33, 40, 16, False, "padding", "bhnd"),
    "bnhd-additive-causal": (1, 3, 3, 30, 30, 64, True, "additive", "bnhd"),
}


def _available(plugin: str) -> None:
    for op in ("attention", "attention_backward"):
        availability = registry.availability(registry.impl(op, plugin))
        if not availability:
            pytest.skip(availability.reason)


def _inputs(shape: tuple, seed: int = 0) -> tuple[tuple[torch.Tensor, ...], dict]:
    b, hq, hk, nq, nk, d, causal, mask_kind, layout = shape
    g = torch.Generator().manual_seed(seed)

    def rand(h: int, n: int) -> torch.Tensor:
        if layout == "bnhd":
            return torch.randn(b, n, h, d, generator=g).transpose(1, 2)
        return torch.randn(b, h, n, d, generator=g)
    kwargs: dict = {"causal": causal}
    if mask_kind == "padding":  # batch 1 sees its first 5 keys only
        lengths = torch.tensor([nk, 5])[:b]
        kwargs["attn_mask"] = (torch.arange(nk)[None, :] < lengths[:, None])[:, None, None, :]
    elif mask_kind == "additive":
        kwargs["attn_mask"] = torch.randn(nq, nk, generator=g)
    return (rand(hq, nq), rand(hk, nk), rand(hk, nk)), kwargs


def _float64_autograd(q, k, v, do, causal, attn_mask, dtype=torch.float64):
    """o and (dq, dk, dv) by torch.autograd through the spec's tensor-op math in ``dtype``."""
    q, k, v = (t.detach().to(dtype).requires_grad_() for t in (q, k, v))
    mask = attn_mask[(None,) * (4 - attn_mask.dim())] if attn_mask is not None else None
    o, _ = attention_math(q, k, v, mask, causal, 1.0 / math.sqrt(q.shape[-1]), dtype)
    return o.detach(), torch.autograd.grad(o, (q, k, v), do.to(dtype))


@pytest.mark.filterwarnings("ignore::RuntimeWarning")  # the interpreter's numpy: log2(0), -inf - -inf
@pytest.mark.parametrize("shape_id", list(_SHAPES))
@pytest.mark.parametrize("plugin", _PLUGINS)
def test_autograd_matches_float64_reference(plugin, shape_id):
    _available(plugin)
    (q, k, v), kwargs = _inputs(_SHAPES[shape_id])
    do = torch.randn(q.shape, generator=torch.Generator().manual_seed(1))

    def run() -> tuple[torch.Tensor, ...]:
        leaves = [t.clone().requires_grad_() for t in (q, k, v)]
        with kernelzoo.use(plugin):
            o = kernelzoo.ops.attention(*leaves, **kwargs)
            return (o.detach(), *torch.autograd.grad(o, leaves, do))

    got = run()
    ref_o, ref_grads = _float64_autograd(q, k, v, do, kwargs["causal"], kwargs.get("attn_mask"))
    base_o, base_grads = _float64_autograd(q, k, v, do, kwargs["causal"], kwargs.get("attn_mask"), torch.float32)
    for i, (name, ref, base) in enumerate(zip(("o", "dq", "dk", "dv"), (ref_o, *ref_grads), (base_o, *base_grads))):
        assert got[i].shape == ref.shape, name
        why = compare(name, got[i], ref, base, output_atol(torch.float32, ref))
        if why is not None:  # tell a wrong kernel from a run that went wrong once
            again = run()[i]
            rerun = compare(name, again, ref, base, output_atol(torch.float32, ref))
            why += "; a second run gives the same" if torch.equal(again, got[i]) else f"; a second run: {rerun}"
        assert why is None, why


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
@pytest.mark.parametrize("plugin", _PLUGINS)
def test_rows_that_attend_no_key_give_zero_not_nan(plugin):
    _available(plugin)
    g = torch.Generator().manual_seed(2)
    q, k, v = (torch.randn(2, 2, 9, 16, generator=g).requires_grad_() for _ in range(3))
    keep = torch.ones(2, 1, 9, 9, dtype=torch.bool)
    keep[0] = False  # batch 0: every row sees nothing
    keep[1, :, 3] = False  # batch 1: row 3 sees nothing
    keep[1, :, 5, 6:] = False  # row 5 sees only keys 0..5, which causal cuts to 0..5: still something
    with kernelzoo.use(plugin):
        o = kernelzoo.ops.attention(q, k, v, attn_mask=keep, causal=True)
        o.backward(torch.randn(o.shape, generator=g))
    for t in (o, q.grad, k.grad, v.grad):
        assert not t.isnan().any()
    assert torch.equal(o[0], torch.zeros_like(o[0])) and torch.equal(o[1, :, 3], torch.zeros_like(o[1, :, 3]))
    assert torch.equal(q.grad[0], torch.zeros_like(q.grad[0]))
    assert torch.equal(q.grad[1, :, 3], torch.zeros_like(q.grad[1, :, 3]))
    assert torch.equal(k.grad[0], torch.zeros_like(k.grad[0]))  # nobody in batch 0 attended a key
    op = registry.op("attention")
    _, lse = registry.impl("attention", plugin).run(op.check(q.detach(), k.detach(), v.detach(), attn_mask=keep,
                                                             causal=True), registry.impl("attention", plugin).config())
    assert (lse[0] == float("-inf")).all() and (lse[1, :, 3] == float("-inf")).all()
    assert torch.isfinite(lse[1, :, [0, 1, 2, 4, 5, 6, 7, 8]]).all()


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
@pytest.mark.parametrize("plugin", _PLUGINS)
def test_lse_is_the_natural_log_sum_exp_of_the_scores(plugin):
    _available(plugin)
    g = torch.Generator().manual_seed(3)
    q, k, v = torch.randn(1, 2, 19, 32, generator=g), torch.randn(1, 1, 23, 32, generator=g), torch.randn(1, 1, 23, 32)
    impl, op = registry.impl("attention", plugin), registry.op("attention")
    _, lse = impl.run(op.check(q, k, v, causal=True, scale=0.3), impl.config())
    scores = (q.double() @ k.double().transpose(-1, -2)) * 0.3  # GQA: both query heads read kv head 0
    scores = scores.masked_fill(torch.ones(19, 23, dtype=torch.bool).triu(1), float("-inf"))
    assert lse.dtype == torch.float32 and lse.shape == (1, 2, 19)
    torch.testing.assert_close(lse.double(), torch.logsumexp(scores, -1), atol=2e-5, rtol=0)


@pytest.mark.parametrize(("n_q", "n_k"), [(5, 9), (9, 5), (1, 7), (7, 7)])
def test_causal_is_torchs_top_left_triangle(n_q, n_k):
    g = torch.Generator().manual_seed(4)
    q, k, v = torch.randn(1, 2, n_q, 8, generator=g), torch.randn(1, 2, n_k, 8, generator=g), torch.randn(1, 2, n_k, 8)
    want = F.scaled_dot_product_attention(q.double(), k.double(), v.double(), is_causal=True)
    for plugin in ("python", "openmp"):
        with kernelzoo.use(plugin):
            torch.testing.assert_close(kernelzoo.ops.attention(q, k, v, causal=True).double(), want,
                                       atol=1e-5, rtol=1e-5)


def test_masks_and_gqa_match_torch_sdpa():
    g = torch.Generator().manual_seed(5)
    q, k, v = torch.randn(2, 4, 11, 16, generator=g), torch.randn(2, 2, 13, 16, generator=g), torch.randn(2, 2, 13, 16)
    keep = torch.rand(2, 1, 11, 13, generator=g) < 0.8
    keep[..., 0] = True  # every row sees a key: torch's SDPA is then defined (its empty rows vary)
    additive = torch.randn(11, 13, generator=g)
    for mask in (keep, additive):
        torch_mask = mask if mask.dtype == torch.bool else mask.double()
        want = F.scaled_dot_product_attention(q.double(), k.double(), v.double(), attn_mask=torch_mask, enable_gqa=True)
        got = kernelzoo.ops.attention(q, k, v, attn_mask=mask).double()
        torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)


def test_backward_runs_on_the_plugin_forced_for_the_forward(monkeypatch):
    impl = registry.impl("attention_backward", "python")
    calls = []
    monkeypatch.setattr(impl, "run", lambda call, config: calls.append(call) or type(impl).run(impl, call, config))
    q, k, v = (torch.randn(1, 1, 4, 8, requires_grad=True) for _ in range(3))
    with kernelzoo.use("python"):
        o = kernelzoo.ops.attention(q, k, v)
    o.sum().backward()  # outside the with block
    assert len(calls) == 1 and q.grad is not None


def test_only_the_inputs_that_require_grad_get_one():
    q, k, v = torch.randn(1, 2, 6, 8, requires_grad=True), torch.randn(1, 2, 6, 8), torch.randn(1, 2, 6, 8)
    kernelzoo.ops.attention(q, k, v).sum().backward()
    assert q.grad is not None and q.grad.shape == q.shape and k.grad is None
    with torch.no_grad():
        assert kernelzoo.ops.attention(q, k, v).grad_fn is None


def test_mask_requiring_grad_is_refused():
    q = torch.randn(1, 1, 3, 8, requires_grad=True)
    mask = torch.zeros(3, 3, requires_grad=True)
    with pytest.raises(ArgumentError, match="attn_mask requires grad"):
        kernelzoo.ops.attention(q, q, q, attn_mask=mask)


def test_spec_sizes_flags_and_examples():
    op, bwd = registry.op("attention"), registry.op("attention_backward")
    call = op.example((2, 8, 64, 32, 1), torch.float32, "cpu", kv_heads=2, n_k=48)
    assert op.sizes(call) == {"batch": 2, "heads": 8, "kv_heads": 2, "n_q": 64, "n_k": 48, "d": 32}
    assert op.flags(call) == "causal-gqa" and op.shape_string(call) == "2x8:2x64:48x32"
    assert op.bucket(call) == (4, 6, 6, 32)
    assert op.flops(call) == 4 * 2 * 8 * 64 * 48 * 32 / 2
    bcall = bwd.example((1, 4, 128, 64), torch.float32, "cpu")
    assert bwd.flags(bcall) == "" and bwd.flops(bcall) == 2.5 * 4 * 4 * 128 * 128 * 64
    assert bcall.inputs["lse"].shape == (1, 4, 128) and bcall.inputs["o"].shape == (1, 4, 128, 64)
    assert all(len(s) == 5 for shapes in op.shapes.values() for s in shapes)


def test_openmp_portable_exponentials_match_the_avx512_ones(monkeypatch):
    """openmp.c computes the probabilities' exp2 and transposes K and V in 16 × 16 blocks with AVX-512
    instructions where the CPU has them, and with portable loops elsewhere (KZ_PORTABLE forces those): both
    give the same values (here Nk = 45 and D = 32 take both the blocks and the element loop's edges)."""
    _available("openmp")
    if not avx512():
        pytest.skip("no AVX-512 on this CPU: both builds are the portable loops")
    (q, k, v), kwargs = _inputs(_SHAPES["causal-nq20-nk45"])
    do = torch.randn(q.shape, generator=torch.Generator().manual_seed(4))

    def run() -> tuple[torch.Tensor, ...]:
        leaves = [t.clone().requires_grad_() for t in (q, k, v)]
        with kernelzoo.use("openmp"):
            o = kernelzoo.ops.attention(*leaves, **kwargs)
            return (o.detach(), *torch.autograd.grad(o, leaves, do))

    fast = run()
    for op in ("attention", "attention_backward"):
        impl = registry.impl(op, "openmp")
        build = impl.library
        monkeypatch.setattr(impl, "library", lambda build=build, **defines: build(**defines, KZ_PORTABLE=1))
    portable = run()
    for name, a, b in zip(("o", "dq", "dk", "dv"), fast, portable):
        torch.testing.assert_close(a, b, rtol=1e-6, atol=1e-6, msg=name)


def test_the_bucket_reads_as_the_attention_ops_make_it():
    """Tune reports and dispatch's reasons name a bucket's parts: attention's are batch·heads, n_q and n_k as powers
    of two and the head dim exactly (not Op.sizes' six sizes, which the default description would pair with them)."""
    q, k = torch.randn(1, 8, 1000, 64), torch.randn(1, 8, 300, 64)
    for name, args in (("attention", (q, k, k)), ("attention_backward", (q, k, k, q, torch.zeros(1, 8, 1000), q))):
        op = registry.op(name)
        call = op.check(*args)
        assert op.describe_bucket(call, op.bucket(call)) == "batch·heads=2^3, n_q=2^10, n_k=2^8, d=64"
    relu = registry.op("relu")
    call = relu.check(torch.randn(512, 512))
    assert relu.describe_bucket(call, relu.bucket(call)) == "n=2^18"


def test_the_torch_backwards_fallback_needs_no_autograd() -> None:
    """Where no flash kernel applies on the GPU (float32, masks), the torch plugin's attention backward computes
    in tensor ops: inside torch.ops.kernelzoo.attention_backward it runs below autograd, where differentiating a
    recomputed forward is impossible. Checked here on the CPU, below autograd as a custom op's kernel runs,
    against the float64 reference at the op's tolerance."""
    from kernelzoo.registry import registry

    op = registry.op("attention_backward")
    math_backward = type(registry.impl("attention_backward", "torch")).math  # a plugin module named torch is
    # imported through the registry, which keeps the op package's own torch
    checked = 0
    for case in op.cases()[:12]:
        if not case.small:
            continue
        args, kwargs = case.make(torch.device("cpu"), torch.float32, torch.Generator().manual_seed(0))
        call = op.check(*args, **kwargs)
        i, p = call.inputs, call.params
        with torch._C._AutoDispatchBelowAutograd():
            grads = math_backward(i["q"], i["k"], i["v"], i["o"], i["do"], i.get("attn_mask"), p["causal"],
                                  p["scale"])
        assert op.verify(call, grads, op.reference(call)) is None, case.id
        checked += 1
    assert checked >= 6


def _attention_f32(q, k, v, causal: bool, matmul=torch.matmul, exp=torch.exp, dtype=torch.float32,
                   diagonal: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """(o, lse) of softmax(q·kᵀ/√D)·v (no GQA, no mask) in ``dtype`` with the given product and exp; causal
    keeps keys j ≤ i + diagonal."""
    q, k, v = (t.to(dtype) for t in (q, k, v))
    s = matmul(q, k.transpose(-1, -2)) * (1.0 / math.sqrt(q.shape[-1]))
    if causal:
        s = s.masked_fill(torch.ones(s.shape[-2:], dtype=torch.bool).triu(1 + diagonal), float("-inf"))
    m = s.amax(-1, keepdim=True)
    p = exp(s - m)
    row_sum = p.sum(-1, keepdim=True)
    return (matmul(p, v) / row_sum).float(), (m + torch.log(row_sum)).squeeze(-1).float()


def _k_loop(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """a @ b with one rounded float32 add per term of the reduction, in order."""
    out = a[..., :, :1] * b[..., :1, :]
    for j in range(1, a.shape[-1]):
        out = out + a[..., :, j:j + 1] * b[..., j:j + 1, :]
    return out


def _split_k(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    half = a.shape[-1] // 2
    return a[..., :half] @ b[..., :half, :] + a[..., half:] @ b[..., half:, :]


def _one_thread(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        return a @ b
    finally:
        torch.set_num_threads(threads)


@pytest.mark.parametrize("causal", [False, True])
def test_verify_takes_float32_in_any_summation_order_and_rejects_wrong_results(causal):
    """The float32 rule (max|o − ref| ≤ 2·max|baseline − ref| + 1e-5·max(1, max|ref|)) is no tighter than
    float32's rounding: the same math with its reductions in other orders passes. It still rejects results that
    are wrong by less than a bug usually is: an off-by-one causal diagonal, one element a few atol off, the
    math in float16, and an exp good to 13 bits (a thousand float32 ulp, as MKL's low-accuracy VML kernel)
    in one batch, which the python plugin's first call could return when that kernel was picked by a race."""
    op = registry.op("attention")
    (q, k, v), _ = _inputs(_SHAPES["b2-n37-d32"])
    call = op.check(q, k, v, causal=causal)
    ref = op.reference(call)
    orders = {"k-loop": _k_loop, "split-k": _split_k, "one thread": _one_thread,
              "einsum": lambda a, b: torch.einsum("...ij,...jk->...ik", a, b),
              "per batch": lambda a, b: torch.cat([a[i:i + 1] @ b[i:i + 1] for i in range(a.shape[0])])}
    for name, matmul in orders.items():
        assert op.verify(call, _attention_f32(q, k, v, causal, matmul), ref) is None, name

    def exp_13_bits_in_batch_0(x: torch.Tensor) -> torch.Tensor:
        y = torch.exp(x)
        y[0] *= 1 + torch.where(torch.arange(y[0].numel()).view(y[0].shape) % 3 == 0, -1.0, 1.0) * 2.0 ** -13
        return y
    o, lse = _attention_f32(q, k, v, causal)
    one_off = o.clone()
    one_off[1, 0, 5, 7] += 4 * output_atol(torch.float32, ref[0])
    wrong = {"one element 4 atol off": (one_off, lse),
             "float16 math": _attention_f32(q, k, v, causal, dtype=torch.float16),
             "low-accuracy exp": _attention_f32(q, k, v, causal, exp=exp_13_bits_in_batch_0)}
    if causal:
        wrong["causal diagonal + 1"] = _attention_f32(q, k, v, causal, diagonal=1)
    for name, outputs in wrong.items():
        assert op.verify(call, outputs, ref) is not None, name
