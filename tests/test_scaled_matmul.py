"""scaled_matmul beyond the conformance suite: its scale semantics held to torch._scaled_mm's, quantization, the
layouts the torch plugin refuses and the fall-back they take, forward only, and the op's tuning key."""

from __future__ import annotations

import pytest
import torch
from kernelzoo_plugins.scaled_matmul import accumulation_slack, cpu_takes_row_scales, quantize

import kernelzoo
from kernelzoo import dispatch
from kernelzoo.backends import triton as triton_backend
from kernelzoo.bench.cases import cases as bench_cases
from kernelzoo.errors import UnsupportedError
from kernelzoo.registry import registry
from kernelzoo.tolerance import check_close
from kernelzoo.tuner.pending import example_params
from kernelzoo.tuner.tune import default_dtypes

E4M3, E5M2 = torch.float8_e4m3fn, torch.float8_e5m2
OP = registry.op("scaled_matmul")
needs_gpu = pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")


def _operands(m: int, n: int, k: int, *, row: bool, b_dtype: torch.dtype = E4M3, device: str = "cpu",
              seed: int = 0) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """a (M×K, row-major) and b (K×N, column-major) quantized from normal data of std 3, with their scales."""
    g = torch.Generator().manual_seed(seed)
    x, w = 3 * torch.randn(m, k, generator=g), 3 * torch.randn(n, k, generator=g)
    a, scale_a = quantize(x, E4M3, 1 if row else None)
    b, scale_b = quantize(w.t(), b_dtype, 0 if row else None)
    return a.to(device), b.to(device), scale_a.to(device), scale_b.to(device)


def _plugins_here() -> list[str]:
    return [i.plugin for i in registry.implementations("scaled_matmul")
            if registry.availability(i) and "cpu" in i.devices()]


@pytest.mark.parametrize("plugin", _plugins_here())
@pytest.mark.parametrize(("row", "out_dtype", "bias"), [(False, torch.bfloat16, False), (True, torch.bfloat16, True),
                                                         (False, torch.float16, True), (True, torch.float32, False)])
def test_scales_mean_what_they_mean_in_torch_scaled_mm(plugin, row, out_dtype, bias) -> None:
    """Each plugin against torch._scaled_mm on the same inputs (torch 2.13's CPU has it), and both against the
    formula written out: row i of a times scale_a[i], column j of b times scale_b[j]."""
    if row and not cpu_takes_row_scales():
        pytest.skip("this torch's CPU torch._scaled_mm takes per-tensor scales only (torch 2.11)")
    m, n, k = 19, 24, 48
    a, b, scale_a, scale_b = _operands(m, n, k, row=row)
    vector = torch.randn(n, generator=torch.Generator().manual_seed(5)).to(out_dtype) if bias else None
    want = torch._scaled_mm(a, b, scale_a, scale_b, bias=vector, out_dtype=out_dtype)
    with kernelzoo.use(plugin):
        got = kernelzoo.ops.scaled_matmul(a, b, scale_a, scale_b, bias=vector, out_dtype=out_dtype)
    assert got.dtype == want.dtype == out_dtype and got.shape == want.shape == (m, n)
    spelled = torch.empty(m, n, dtype=torch.float64)
    sa = scale_a.double().reshape(-1).expand(m) if not row else scale_a.double()[:, 0]
    sb = scale_b.double().reshape(-1).expand(n) if not row else scale_b.double()[0]
    for i in range(m):
        for j in range(n):
            spelled[i, j] = (a[i].double() * sa[i] * (b[:, j].double() * sb[j])).sum()
    if bias:
        spelled += vector.double()
    call = OP.check(a, b, scale_a, scale_b, bias=vector, out_dtype=out_dtype)
    tol = OP.tolerance(call)
    for out in (got, want):
        assert OP.verify(call, out, spelled) is None
    # and they agree with each other to within the output's rounding
    close = (got.double() - want.double()).abs() <= 2 * tol.atol + 2 * tol.rtol * want.double().abs()
    assert bool(close.all())


def test_a_wrong_scale_is_caught_by_the_reference() -> None:
    """The tolerance is tight enough that a plugin which dropped a scale, or read row-wise scales by column, fails."""
    a, b, scale_a, scale_b = _operands(24, 24, 64, row=True)
    call = OP.check(a, b, scale_a, scale_b, out_dtype=torch.float32)
    ref = OP.reference(call)
    dropped = (a.float() * scale_a) @ b.float()
    swapped = (a.float() * scale_b.t()) @ (b.float() * scale_a.t())
    assert OP.verify(call, dropped, ref) is not None
    assert OP.verify(call, swapped, ref) is not None
    assert OP.verify(call, ((a.float() * scale_a) @ (b.float() * scale_b)), ref) is None


@pytest.mark.parametrize("dtype", [E4M3, E5M2])
def test_quantize_keeps_every_value_within_the_dtypes_rounding(dtype) -> None:
    x = 7 * torch.randn(33, 65, generator=torch.Generator().manual_seed(2))
    eps = torch.finfo(dtype).eps  # 2^-3 for e4m3, 2^-2 for e5m2: half of it is the rounding
    for dim, shape in ((None, ()), (1, (33, 1)), (0, (1, 65))):
        q, scale = quantize(x, dtype, dim)
        assert q.dtype == dtype and scale.dtype == torch.float32 and tuple(scale.shape) == shape
        back = q.float() * scale
        # values near the top keep eps/2 relative error; the smallest fall to the subnormals' absolute step
        step = torch.finfo(dtype).smallest_normal * eps * scale
        assert bool(((back - x).abs() <= eps / 2 * x.abs() + step).all()), dim
        # the largest magnitude lands on the dtype's largest finite value
        peak = (q.float().abs().amax() if dim is None else q.float().abs().amax(dim)).max()
        assert float(peak) == torch.finfo(dtype).max


def test_a_call_torch_scaled_mm_refuses_falls_back_and_a_forced_one_says_why(monkeypatch) -> None:
    a, b, scale_a, scale_b = _operands(16, 32, 32, row=False)

    def refuse(*args, **kwargs):
        raise RuntimeError("Only multiplication of row-major and column-major matrices is supported by cuBLASLt")

    monkeypatch.setattr(torch, "_scaled_mm", refuse)
    monkeypatch.setattr(dispatch, "_warned", set())  # the fall-back warns once a process
    dispatch.clear_cache()
    try:
        with kernelzoo.use("torch"), pytest.raises(UnsupportedError, match="torch._scaled_mm cannot run .*row-major"):
            kernelzoo.ops.scaled_matmul(a, b, scale_a, scale_b)
        with pytest.warns(RuntimeWarning, match="torch cannot run .* running python"):
            out = kernelzoo.ops.scaled_matmul(a, b, scale_a, scale_b)
        assert OP.verify(OP.check(a, b, scale_a, scale_b), out, OP.reference(OP.check(a, b, scale_a, scale_b))) \
            is None
    finally:
        dispatch.clear_cache()


@pytest.mark.parametrize("plugin", _plugins_here())
def test_the_op_is_forward_only_its_output_requires_no_grad(plugin) -> None:
    a, b, scale_a, scale_b = _operands(16, 16, 32, row=False)  # per-tensor scales: every torch's CPU takes them
    scale_a.requires_grad_()
    assert OP.derivative is None
    with kernelzoo.use(plugin):
        out = kernelzoo.ops.scaled_matmul(a, b, scale_a, scale_b)
        assert not out.requires_grad and out.grad_fn is None
        assert not torch.ops.kernelzoo.scaled_matmul(a, b, scale_a, scale_b).requires_grad


def test_the_custom_op_defaults_to_bfloat16_and_takes_a_dtype() -> None:
    a, b, scale_a, scale_b = _operands(16, 16, 32, row=False)
    assert torch.ops.kernelzoo.scaled_matmul(a, b, scale_a, scale_b).dtype == torch.bfloat16
    out = torch.ops.kernelzoo.scaled_matmul(a, b, scale_a, scale_b, None, torch.float16)
    assert out.dtype == torch.float16
    assert torch.equal(out, kernelzoo.ops.scaled_matmul(a, b, scale_a, scale_b, out_dtype=torch.float16))


def test_the_tuning_key_tells_the_variants_apart_and_rebuilds_from_its_parameters() -> None:
    a, b, scale_a, scale_b = _operands(40, 48, 64, row=True, b_dtype=E5M2)
    bias = torch.randn(48).half()
    call = OP.check(a, b, scale_a, scale_b, bias=bias, out_dtype=torch.float16)
    assert OP.flags(call) == "float16-row-bias-b-float8_e5m2"
    assert OP.shape_string(call) == "40x48x64"
    plain = OP.check(*_operands(40, 48, 64, row=False))
    assert OP.flags(plain) == "bfloat16" and OP.bucket(plain) == OP.bucket(call)
    # `tune --pending` rebuilds a called key from its shape string and the call's parameters
    params = example_params(OP, OP.parse_shape(OP.shape_string(call)), "float8_e4m3fn", call.params)
    again = OP.example(OP.parse_shape(OP.shape_string(call)), torch.float8_e4m3fn, "cpu", **params)
    assert OP.flags(again) == OP.flags(call) and OP.sizes(again) == OP.sizes(call)
    assert again.inputs["b"].stride(0) == 1, "examples give b column-major, as torch._scaled_mm takes it"


@pytest.mark.parametrize(("n", "out_dtype", "unaligned"), [(4097, torch.bfloat16, True), (4096, torch.bfloat16, False),
                                                           (4, torch.float32, False), (6, torch.float32, True)])
def test_outputs_whose_rows_a_tma_store_cannot_take_have_keys_of_their_own(n, out_dtype, unaligned) -> None:
    call = OP.check(*_operands(40, n, 64, row=False), out_dtype=out_dtype)
    assert OP.flags(call).endswith("-unaligned") is unaligned
    params = example_params(OP, OP.parse_shape(OP.shape_string(call)), "float8_e4m3fn", call.params)
    again = OP.example(OP.parse_shape(OP.shape_string(call)), torch.float8_e4m3fn, "cpu", **params)
    assert OP.flags(again) == OP.flags(call)


def test_tuning_and_benchmarks_take_the_8_bit_input_dtypes() -> None:
    assert default_dtypes("scaled_matmul", ["torch", "python"], "cpu") == ["float8_e4m3fn", "float8_e5m2"]
    found = bench_cases("scaled_matmul", "cpu")
    assert {(c.dtype, dict(c.kwargs)["scales"]) for c in found} == {
        (d, s) for d in ("float8_e4m3fn", "float8_e5m2") for s in ("tensor", "row")}
    assert {c.plugin for c in found} >= {"torch", "python"}


@pytest.mark.skipif(not triton_backend.interpreting() and not torch.cuda.is_available(),
                    reason="Triton runs neither on a GPU nor in its interpreter here")
def test_triton_rejects_a_config_that_cannot_fit() -> None:
    from kernelzoo_plugins._gemm.limits import check_fits

    impl = registry.impl("scaled_matmul", "triton")
    check_fits(1, impl.config())
    with pytest.raises(UnsupportedError, match="KiB of shared memory"):
        check_fits(1, impl.config({"BLOCK_M": 256, "BLOCK_N": 256, "num_stages": 5}))
    with pytest.raises(UnsupportedError, match="accumulators"):
        check_fits(1, impl.config({"BLOCK_M": 256, "BLOCK_N": 256, "BLOCK_K": 64, "num_warps": 4, "num_stages": 3}))


@needs_gpu
def test_the_torch_plugin_refuses_layouts_and_sizes_cublas_cannot_take_and_dispatch_runs_triton() -> None:
    torch_impl = registry.impl("scaled_matmul", "torch")
    a, b, scale_a, scale_b = _operands(64, 64, 64, row=False, device="cuda")
    if torch_impl.supports(OP.check(a, b, scale_a, scale_b)) is not None:
        pytest.skip(torch_impl.supports(OP.check(a, b, scale_a, scale_b)))
    refused = {
        "b-row-major": (a, b.contiguous(), scale_a, scale_b),
        "a-column-major": (a.t().contiguous().t(), b, scale_a, scale_b),
        "n-odd": (a, b[:, :63], scale_a, scale_b),
    }
    for what, args in refused.items():
        call = OP.check(*args)
        assert torch_impl.supports(call) is not None, what
        assert kernelzoo.explain("scaled_matmul", *args).plugin != "torch", what
        assert OP.verify(call, kernelzoo.ops.scaled_matmul(*args), OP.reference(call)) is None, what
    bias = torch.randn(64, device="cuda")
    assert "no bias with a float32 output" in torch_impl.supports(
        OP.check(a, b, scale_a, scale_b, bias=bias, out_dtype=torch.float32))


@needs_gpu
@pytest.mark.parametrize("row", [False, True])
def test_triton_matches_torch_scaled_mm_on_the_gpu(row) -> None:
    a, b, scale_a, scale_b = _operands(1024, 1024, 2048, row=row, device="cuda")
    call = OP.check(a, b, scale_a, scale_b)
    why = next(filter(None, (registry.impl("scaled_matmul", p).supports(call) for p in ("torch", "triton"))), None)
    if why:
        pytest.skip(why)
    with kernelzoo.use("triton"):
        got = kernelzoo.ops.scaled_matmul(a, b, scale_a, scale_b)
    want = torch._scaled_mm(a, b, scale_a, scale_b, out_dtype=torch.bfloat16)
    ref = OP.reference(call)
    assert OP.verify(call, got, ref) is None and OP.verify(call, want, ref) is None


def test_a_gpu_output_may_carry_the_fp8_accumulation_error_and_no_more() -> None:
    from kernelzoo_plugins.scaled_matmul import FP8_ACCUMULATION

    a, b, scale_a, scale_b = _operands(8, 8, 64, row=False)
    call = OP.check(a, b, scale_a, scale_b, out_dtype=torch.float32)
    ref = OP.reference(call)
    da, db = (t.double() * s.double() for t, s in ((a, scale_a), (b, scale_b)))
    slack = FP8_ACCUMULATION * (da.abs() @ db.abs())
    tol = OP.tolerance(call)
    allowed = tol.atol + tol.rtol * ref.abs() + slack
    near = (ref + 0.9 * allowed).float()  # inside the slack, outside the tolerance alone
    assert check_close(near, ref, tol) is not None
    assert check_close(near, ref, tol, slack) is None
    far = (ref + 1.5 * allowed).float()
    assert "per-element slack" in check_close(far, ref, tol, slack).what
    assert accumulation_slack(call) is None  # on the CPU every plugin sums in float32
