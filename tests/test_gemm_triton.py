"""The GEMM family's Triton kernels (plugins/_gemm/triton.py): the persistent TMA kernel and the tiled pointer
kernel compute the same products for every operand layout, an operand TMA cannot read as it lies is copied aligned
(and only then), and matmul keys unaligned and TF32 calls apart. Without a GPU they run in Triton's interpreter."""

from __future__ import annotations

import pytest
import torch

from kernelzoo.errors import UnsupportedError
from kernelzoo.registry import registry
from kernelzoo.tolerance import Tolerance, tf32_products, with_tf32

gemm_triton = pytest.importorskip("kernelzoo_plugins._gemm.triton")

SMALL = {"BLOCK_M": 16, "BLOCK_N": 32, "BLOCK_K": 16, "GROUP_M": 2, "num_warps": 4, "num_stages": 2}
DEVICE = "cuda" if torch.cuda.is_available() else "cpu"


def _needs_triton() -> None:
    impl = registry.impl("matmul", "triton")
    if not registry.availability(impl):
        pytest.skip(registry.availability(impl).reason)
    if DEVICE == "cuda" and torch.cuda.get_device_capability()[0] < 9:
        pytest.skip("the TMA kernel needs compute capability 9.0")


def _r(*shape: int) -> torch.Tensor:
    return torch.randn(shape, generator=torch.Generator().manual_seed(sum(shape))).to(DEVICE)


LAYOUTS = {
    "plain": lambda: (_r(33, 47), _r(47, 29)),
    "transposed-a": lambda: (_r(47, 33).t(), _r(47, 29)),
    "transposed-b": lambda: (_r(33, 47), _r(29, 47).t()),
    "batched": lambda: (_r(3, 33, 47), _r(3, 47, 29)),
    "broadcast-a": lambda: (_r(33, 48), _r(3, 48, 29)),
    "broadcast-b-batch-1": lambda: (_r(3, 48, 33).transpose(1, 2), _r(1, 48, 32)),
    "sliced": lambda: (_r(66, 50)[::2, 1:48], _r(47, 90)[:, ::3]),
    "unaligned-rows": lambda: (_r(31, 45), _r(45, 37)),
    "one-element": lambda: (_r(1, 1), _r(1, 1)),
}


@pytest.mark.parametrize("tma", [1, 0])
@pytest.mark.parametrize("subtile", [0, 1])
@pytest.mark.parametrize("layout", list(LAYOUTS))
def test_both_kernels_compute_the_product(layout, tma, subtile):
    _needs_triton()
    a, b = LAYOUTS[layout]()
    bias = _r(b.shape[-1])
    batch = max(a.shape[0] if a.dim() == 3 else 1, b.shape[0] if b.dim() == 3 else 1)
    shape = (batch, a.shape[-2], b.shape[-1]) if max(a.dim(), b.dim()) == 3 else (a.shape[-2], b.shape[-1])
    c = torch.full(shape, float("nan"), device=DEVICE)  # every element must be written
    gemm_triton.gemm(a, b, c, bias, {**SMALL, "TMA": tma, "SUBTILE": subtile, "WS": 0})
    want = torch.matmul(a.double(), b.double()) + bias.double()
    torch.testing.assert_close(c.double(), want, rtol=1e-5, atol=1e-4)


def test_tma_reads_aligned_operands_in_place_and_copies_the_others():
    a = _r(32, 48)
    transposed = _r(40, 48).t()  # (48, 40) column-major: read through its transpose
    odd = _r(48, 37)  # rows of 37 float32: 148 bytes, not a multiple of 16
    op_a = gemm_triton.tma_operand(a.unsqueeze(0), 16, 16)
    op_t = gemm_triton.tma_operand(transposed.unsqueeze(0), 16, 16)
    op_odd = gemm_triton.tma_operand(odd.unsqueeze(0), 16, 16)
    assert (op_a.transposed, op_a.batched, op_a.desc.base.data_ptr()) == (False, False, a.data_ptr())
    assert (op_t.transposed, op_t.desc.base.data_ptr()) == (True, transposed.data_ptr())
    assert op_odd.desc.base.data_ptr() != odd.data_ptr()
    assert op_odd.desc.strides[0] * 4 % 16 == 0 and torch.equal(op_odd.desc.base, odd)


def test_matmul_keys_unaligned_calls_apart():
    op = registry.op("matmul")
    assert op.flags(op.check(torch.ones(8, 16), torch.ones(16, 24))) == ""
    assert op.flags(op.check(torch.ones(8, 16), torch.ones(16, 23))) == "unaligned"
    assert op.flags(op.check(torch.ones(8, 15, dtype=torch.float16), torch.ones(15, 8, dtype=torch.float16))) \
        == "unaligned"
    assert op.flags(op.check(torch.ones(8, 16, dtype=torch.float16), torch.ones(16, 8, dtype=torch.float16))) == ""


def test_tf32_follows_torchs_switch_and_widens_the_tolerance(monkeypatch):
    cuda = torch.device("cuda")
    monkeypatch.setattr(torch.backends.cuda.matmul, "allow_tf32", False)
    assert not tf32_products(torch.float32, cuda)
    monkeypatch.setattr(torch.backends.cuda.matmul, "allow_tf32", True)
    assert tf32_products(torch.float32, cuda)
    assert not tf32_products(torch.float16, cuda) and not tf32_products(torch.float32, torch.device("cpu"))
    base = Tolerance(rtol=1.3e-6, atol=1e-5)
    wide = with_tf32(base, 4096)
    # σ of K = 4096 truncated products is 2^-10·sqrt(2K/3) ≈ 0.051: the bound must pass 5σ and stay near 10σ
    assert 5 * 0.051 < wide.atol - base.atol < 12 * 0.051 and wide.rtol == 2.0**-9


@pytest.mark.skipif(not torch.cuda.is_available(), reason="TF32 products run on a CUDA GPU's tensor cores")
def test_tf32_products_pass_the_widened_tolerance(monkeypatch):
    _needs_triton()
    monkeypatch.setattr(torch.backends.cuda.matmul, "allow_tf32", True)
    op, impl = registry.op("matmul"), registry.impl("matmul", "triton")
    call = op.example((512, 384, 1024), torch.float32, "cuda", torch.Generator().manual_seed(1))
    out = impl.run(call, impl.config({"BLOCK_N": 128, "BLOCK_K": 32}))
    assert op.flags(call) == "tf32"
    assert op.verify(call, out, op.reference(call)) is None
    # and TF32 was used: IEEE float32 would be far closer
    err = float((out.double() - op.reference(call)).abs().max())
    assert err > 1e-3


@pytest.mark.parametrize("make", [
    lambda: _r(3, 40, 29),                      # row-major (K×C): K apart, copied
    lambda: _r(45, 37)[None],                   # odd K: lines padded to 16 bytes
    lambda: _r(37, 45).t()[None],               # already K-major: itself
    lambda: _r(66, 50)[::2, 1:48][None],        # strided rows and columns
], ids=["batched", "odd-k", "k-major", "strided"])
def test_k_major_copies_lines_of_k_aligned_for_tma(make):
    _needs_triton()
    t = make()
    lines = gemm_triton.k_major(t)
    assert torch.equal(lines, t)
    assert lines.stride(-2) == 1
    if t.stride(-2) != 1:
        assert lines.data_ptr() % 16 == 0 and lines.stride(-1) * t.element_size() % 16 == 0


def test_k_major_refuses_more_matrices_than_a_grid_axis_holds():
    _needs_triton()
    with pytest.raises(UnsupportedError, match="65536 matrices exceeds the grid's 65535"):
        gemm_triton.k_major(torch.zeros(65536, 2, 3, device=DEVICE))


def test_tf32x3_applies_to_float32_without_tf32_only(monkeypatch):
    _needs_triton()
    config = {**SMALL, "TMA": 1, "SUBTILE": 0, "WS": 0, "TF32X3": 1}
    half = torch.zeros(16, 16, dtype=torch.float16, device=DEVICE)
    with pytest.raises(UnsupportedError, match="TF32X3 splits float32 calls that run without TF32, not torch.float16"):
        gemm_triton.gemm(half, half, half.clone(), None, config)
    if DEVICE == "cuda":
        monkeypatch.setattr(torch.backends.cuda.matmul, "allow_tf32", True)
        x = torch.zeros(16, 16, device=DEVICE)
        with pytest.raises(UnsupportedError, match="in TF32"):
            gemm_triton.gemm(x, x, x.clone(), None, config)


@pytest.mark.parametrize("layout", ["plain", "transposed-a", "batched", "sliced", "unaligned-rows"])
def test_tf32x3_meets_the_float32_tolerance(layout):
    """Three TF32 products per product pass the op's IEEE float32 check (float64 reference, fresh inputs)."""
    _needs_triton()
    op, impl = registry.op("matmul"), registry.impl("matmul", "triton")
    a, b = LAYOUTS[layout]()
    call = op.check(a, b)
    out = impl.run(call, impl.config({**SMALL, "TF32X3": 1, "SUBTILE": 0}))
    assert op.flags(call) in ("", "unaligned")
    assert op.verify(call, out, op.reference(call)) is None
