"""kernelzoo.backends.triton.Launcher: a repeated launch skips Triton's argument binding but must run
the kernel Triton would have compiled for those arguments. On a GPU the cache is exercised (keys that
differ only in what Triton specializes on: alignment, integer divisibility, dtype, constexprs); in the
interpreter (CI) every launch goes through Triton and the results are checked the same way."""

from __future__ import annotations

import pytest
import torch
import triton
import triton.language as tl
from triton.runtime.jit import JITFunction

from kernelzoo.backends.triton import Launcher, _arg_key, interpreting

DEVICE = torch.device("cuda" if torch.cuda.is_available() else "cpu")


@triton.jit
def _axpy(x, y, out, n, stride, alpha, BLOCK: tl.constexpr, NEGATE: tl.constexpr = False):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    ok = offs < n
    v = alpha * tl.load(x + offs * stride, mask=ok) + tl.load(y + offs * stride, mask=ok)
    tl.store(out + offs, -v if NEGATE else v, mask=ok)


def run(launch: Launcher, x: torch.Tensor, y: torch.Tensor, alpha: float, block: int = 64,
        **flags: bool) -> torch.Tensor:
    out = torch.empty(x.shape, dtype=x.dtype, device=x.device)
    n = x.numel()
    launch((triton.cdiv(n, block),), x, y, out, n, x.stride(0), alpha, BLOCK=block, **flags)
    return out


# (n, offset into a larger buffer in elements, dtype): n = 1 and multiples of 16 are specialized by
# Triton, an offset of 1 element makes the pointers 2- or 4-byte aligned instead of 16
CASES = [(1000, 0, torch.float32), (1024, 0, torch.float32), (1, 0, torch.float32), (1000, 1, torch.float32),
         (1024, 0, torch.float16), (1024, 3, torch.float16)]


def inputs(n: int, offset: int, dtype: torch.dtype, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator(device=DEVICE).manual_seed(seed)
    x, y = (torch.randn(n + offset, device=DEVICE, dtype=dtype, generator=g)[offset:] for _ in range(2))
    return x, y


def expected(x: torch.Tensor, y: torch.Tensor, alpha: float, negate: bool = False) -> torch.Tensor:
    v = (alpha * x.double() + y.double()).to(x.dtype)
    return -v if negate else v


def test_every_launch_computes_what_its_arguments_ask() -> None:
    launch = Launcher(_axpy)
    # twice over, so that on a GPU the second pass runs every case from the cache, interleaved
    for repeat in range(2):
        for i, (n, offset, dtype) in enumerate(CASES):
            x, y = inputs(n, offset, dtype, seed=10 * repeat + i)
            for negate in (False, True):
                out = run(launch, x, y, 0.5 + i, NEGATE=negate)
                torch.testing.assert_close(out, expected(x, y, 0.5 + i, negate), rtol=1e-3, atol=1e-3)


def test_strided_views_and_changed_block() -> None:
    launch = Launcher(_axpy)
    base = torch.randn(3000, device=DEVICE)
    x, y = base[::3], base[1::3]
    for block in (64, 128, 64):
        torch.testing.assert_close(run(launch, x, y, 2.0, block=block), expected(x, y, 2.0))


@pytest.mark.skipif(interpreting() or DEVICE.type != "cuda", reason="the compiled-kernel cache needs a GPU")
def test_one_cache_entry_per_specialization() -> None:
    launch = Launcher(_axpy)
    for _ in range(3):
        for n, offset, dtype in CASES:
            run(launch, *inputs(n, offset, dtype, seed=n), 1.5)
    # the key holds the exact n (1000, 1024, 1), the alignment and the dtype: one entry per case
    assert len(launch._compiled) == len(CASES)
    keys_before = set(launch._compiled)
    run(launch, *inputs(1000, 0, torch.float32, seed=7), 3.0)  # another alpha: a float is not specialized
    assert set(launch._compiled) == keys_before


def test_launches_through_triton_when_asked(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KERNELZOO_TRITON_LAUNCH", "triton")
    launch = Launcher(_axpy)
    for n, offset, dtype in CASES * 2:
        x, y = inputs(n, offset, dtype, seed=n + offset)
        torch.testing.assert_close(run(launch, x, y, 0.25), expected(x, y, 0.25), rtol=1e-3, atol=1e-3)
    assert not launch._compiled  # nothing cached: every call went through Triton's own path


def test_argument_keys_follow_what_triton_specializes() -> None:
    base = torch.zeros(64, device=DEVICE)
    # integers: their values (Triton specializes 1 and multiples of 16); floats: their type only
    assert _arg_key(16) != _arg_key(17) and _arg_key(1) != _arg_key(2)
    assert _arg_key(0.5) == _arg_key(2.0)
    # tensors: dtype and 16-byte alignment, not the address or the shape
    assert _arg_key(base) == _arg_key(base[4:]) == _arg_key(torch.zeros(8, device=DEVICE))
    assert _arg_key(base) != _arg_key(base[1:])
    assert _arg_key(base) != _arg_key(base.half())
    assert _arg_key(None) is None and _arg_key(True) is True


def test_tail_holds_the_constexprs_in_signature_order() -> None:
    # a compiled-kernel JITFunction of _axpy even under the interpreter (it knows which parameters are constexprs)
    launch = Launcher(JITFunction(_axpy.fn))
    x = torch.zeros(4, device=DEVICE)
    runtime = (x, x, x, 4, 1, 0.5)
    # NEGATE left at its default, then given; num_warps is a launch option, not a parameter
    assert launch.tail(runtime, {"BLOCK": 64, "num_warps": 4}) == (64, False)
    assert launch.tail(runtime, {"NEGATE": True, "BLOCK": 32}) == (32, True)
    # a runtime parameter given by keyword: no tail, so that kernel's launches all go through Triton
    assert launch.tail(runtime[:-1], {"alpha": 0.5, "BLOCK": 64}) is None


def test_the_host_grid_helpers_agree_with_tritons() -> None:
    import triton

    from kernelzoo.backends.triton import cdiv, next_power_of_2

    sizes = [*range(0, 5000), 2**20 - 1, 2**20, 2**20 + 1, 2**31 - 1, 2**31, 2**40 + 3]
    for n in sizes:
        assert next_power_of_2(n) == triton.next_power_of_2(n), n
        for block in (1, 3, 16, 128, 1000, 4096):
            assert cdiv(n, block) == triton.cdiv(n, block), (n, block)
