"""dropout beyond the conformance cases: every plugin drops exactly the elements of the spec's hash (several
seeds, sizes and p), the hash against a plain-Python transcription of its definition (indices and seeds past
2**32), the keep fraction at n = 10**6, masks of different seeds that look independent, and same seed and
shape giving the same mask (what the backward relies on)."""

from __future__ import annotations

import pytest
import torch
from kernelzoo_plugins.dropout import hash32, keep_mask, scale, threshold

import kernelzoo
from kernelzoo.backends import triton as triton_backend
from kernelzoo.registry import registry

DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])
SEEDS = [0, 1, 2**32 - 1, 2**32, 2**40 + 12345, 2**63 - 1]
M32 = 0xFFFFFFFF


def _lowbias32(v: int) -> int:
    v ^= v >> 16
    v = (v * 0x7FEB352D) & M32
    v ^= v >> 15
    v = (v * 0x846CA68B) & M32
    return v ^ (v >> 16)


def _hash_by_definition(seed: int, i: int) -> int:
    """The module docstring's definition, in Python's unbounded ints."""
    g = 0x9E3779B9
    k1 = _lowbias32((seed >> 32) ^ _lowbias32(((seed & M32) + g) & M32))
    k2 = _lowbias32((k1 + g) & M32)
    return _lowbias32(_lowbias32((i & M32) ^ k1) ^ k2 ^ (((i >> 32) * g) & M32))


def _runnable(device: str) -> list:
    """The dropout implementations that run on ``device`` here (Triton on the CPU: its interpreter)."""
    return [impl for impl in registry.implementations("dropout")
            if registry.availability(impl) and device in impl.devices()]


def _dtypes(impl, device: str) -> list[torch.dtype]:
    return list(impl.dtypes[device]) if device == "cuda" else [torch.float32]


def test_the_plugins_here_are_all_checked():
    expected = {"python", "torch", "openmp"} | ({"triton"} if triton_backend.interpreting() else set())
    assert expected <= {impl.plugin for impl in _runnable("cpu")}


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("n", [1, 17, 4099])
@pytest.mark.parametrize("seed", SEEDS)
def test_every_plugin_drops_the_elements_of_the_spec(device, n, seed):
    p = 0.3
    keep = keep_mask((n,), p, seed, device)
    for impl in _runnable(device):
        for dtype in _dtypes(impl, device):
            # also one element past a 16-byte boundary: the cuda plugin's scalar kernel
            for x in (torch.ones(n, dtype=dtype, device=device), torch.ones(n + 1, dtype=dtype, device=device)[1:]):
                y = impl.run(registry.op("dropout").check(x, p, seed), impl.config())
                assert torch.equal(y != 0, keep), f"{impl.key} {dtype} n={n} seed={seed}"
                assert torch.equal(y[keep], torch.full_like(y[keep], scale(p))), f"{impl.key} {dtype} kept values"


def test_hash_is_its_definition():
    indices = [0, 1, 2, 255, 256, 1000, 2**31, 2**32 - 1, 2**32, 2**32 + 1, 2**40 + 3, 2**62 + 7]
    for seed in SEEDS:
        got = hash32(torch.tensor(indices), seed).tolist()
        assert got == [_hash_by_definition(seed, i) for i in indices], f"seed {seed}"


def test_hash_is_pinned():
    # a change of the hash changes every mask (and what a saved seed reproduces): make it on purpose, here
    pairs = [(0, 0), (12345, 7), (2**40 + 12345, 2**32 + 5)]
    expected = [3730203031, 3353280800, 1921710977]
    assert [_hash_by_definition(seed, i) for seed, i in pairs] == expected
    assert [int(hash32(torch.tensor([i]), seed)) for seed, i in pairs] == expected


def test_threshold_is_u_at_least_p():
    for p in (0.0, 0.1, 0.5, 0.9, 1 - 2**-24, 1 - 2**-30, 2**-25):
        t = threshold(p)
        assert t * 2**-24 >= p and (t - 1) * 2**-24 < p, p


@pytest.mark.parametrize("p", [0.1, 0.5, 0.9])
def test_keep_fraction_at_a_million(p):
    n = 10**6
    fraction = keep_mask((n,), p, 2**40 + 99).double().mean().item()
    assert abs(fraction / (1 - p) - 1) < 0.01, fraction
    for impl in _runnable("cpu"):
        if impl.plugin in ("openmp", "python"):  # the interpreter takes seconds here; its mask is the spec's
            y = impl.run(registry.op("dropout").check(torch.ones(n), p, 2**40 + 99), impl.config())
            assert abs((y != 0).double().mean().item() / (1 - p) - 1) < 0.01, impl.key


def test_different_seeds_give_independent_masks():
    n, p = 10**5, 0.5
    seeds = [0, 1, 2, 3, 2**32, 2**32 + 1, 2**62 + 5]
    masks = {seed: keep_mask((n,), p, seed) for seed in seeds}
    neighbour = torch.arange(n) ^ 1  # with one keyed round, keys k and k ^ 1 would swap neighbours
    for a in seeds:
        # neighbouring elements of one mask agree half the time, as independent coin flips would
        agree = (masks[a][:-1] == masks[a][1:]).double().mean().item()
        assert abs(agree - 0.5) < 0.01, (a, agree)
        for b in seeds:
            if a < b:
                for other in (masks[b], masks[b][neighbour]):
                    agree = (masks[a] == other).double().mean().item()
                    assert abs(agree - 0.5) < 0.01, (a, b, agree)  # p² + (1 - p)² for independent masks


@pytest.mark.parametrize("device", DEVICES)
def test_same_seed_and_shape_same_mask(device):
    # the backward is dropout(grad, p, seed): grad must lose the elements x lost
    g = torch.Generator().manual_seed(0)
    x = (torch.rand(33, 17, generator=g) + 0.5).to(device)
    grad = (torch.rand(33, 17, generator=g) + 0.5).to(device)
    y, dx = kernelzoo.ops.dropout(x, 0.4, 2**33 + 1), kernelzoo.ops.dropout(grad, 0.4, 2**33 + 1)
    assert torch.equal(y == 0, dx == 0) and 0 < int((y == 0).sum()) < y.numel()
    assert not torch.equal(kernelzoo.ops.dropout(x, 0.4, 2**33 + 2) == 0, y == 0)


def test_p_zero_is_a_copy():
    x = torch.randn(1000)
    x[::7] = float("nan")
    x[3::11] = float("inf")
    for impl in _runnable("cpu"):
        y = impl.run(registry.op("dropout").check(x, 0.0, 5), impl.config())
        assert torch.equal(y.nan_to_num(), x.nan_to_num()) and torch.equal(y.isnan(), x.isnan()), impl.key


def test_dropped_inf_and_nan_give_nan_as_torch():
    x = torch.tensor([float("inf"), float("-inf"), float("nan")] * 200)
    keep = keep_mask(x.shape, 0.5, 3)
    for impl in _runnable("cpu"):
        y = impl.run(registry.op("dropout").check(x, 0.5, 3), impl.config())
        assert y[~keep].isnan().all() and torch.equal(y[keep].nan_to_num(), (x[keep] * 2).nan_to_num()), impl.key


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("plugin", ["cuda", "triton"])
def test_indices_past_2_32_on_the_gpu(plugin):
    """The kernels' 64-bit indices: 2**32 + 4099 float16 elements (8.6 GB in, 8.6 GB out)."""
    if torch.cuda.get_device_properties(0).total_memory < 24 * 2**30:
        pytest.skip("needs 24 GiB of GPU memory")
    impl = registry.impl("dropout", plugin)
    if not registry.availability(impl):
        pytest.skip(registry.availability(impl).reason)
    n, seed, p = 2**32 + 4099, 2**40 + 12345, 0.5
    x = torch.ones(n, dtype=torch.float16, device="cuda")
    y = impl.run(registry.op("dropout").check(x, p, seed), impl.config())
    del x
    for start in (0, 2**31 - 3000, 2**32 - 3000):
        index = torch.arange(start, min(start + 8000, n), device="cuda")
        keep = (hash32(index, seed) >> 8) >= threshold(p)
        assert torch.equal(y[start:start + len(index)] != 0, keep), start
