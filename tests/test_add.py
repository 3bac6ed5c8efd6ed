"""add beyond the conformance cases: random broadcasts of random views (transposed, sliced,
expanded) through every CPU plugin, the merged layout's addresses, and the CUDA strided
kernel's index arithmetic (magic-number division) replayed in numpy, since CI has no GPU."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from kernelzoo_plugins._elementwise.cuda import dim_args, divider
from kernelzoo_plugins.add import MAX_DIMS, broadcast_shape, layout

from kernelzoo.backends import triton as triton_backend
from kernelzoo.registry import poison_outputs, registry
from kernelzoo.tolerance import check_close


@st.composite
def views(draw: st.DrawFn, shape: tuple[int, ...]) -> torch.Tensor:
    """A float32 tensor that broadcasts to ``shape``: some leading dimensions dropped, some
    sizes 1, and stored contiguous, transposed, strided (every other element) or expanded."""
    shape = shape[draw(st.integers(0, len(shape))):]
    shape = tuple(1 if draw(st.booleans()) else n for n in shape)
    kind = draw(st.sampled_from(["contiguous", "transposed", "sliced", "expanded"]))
    g = torch.Generator().manual_seed(draw(st.integers(0, 2**31)))
    if kind == "transposed" and len(shape) >= 2:
        return torch.randn(shape[::-1], generator=g).permute(*reversed(range(len(shape))))
    if kind == "sliced" and shape:
        return torch.randn((*shape[:-1], 2 * shape[-1] + 1), generator=g)[..., 1::2]
    if kind == "expanded":  # a size-1 dimension expanded to the full size: stride 0 in the input itself
        base = torch.randn(tuple(1 if i % 2 else n for i, n in enumerate(shape)), generator=g)
        return base.expand(shape)
    return torch.randn(shape, generator=g)


@st.composite
def operands(draw: st.DrawFn) -> tuple[torch.Tensor, torch.Tensor]:
    shape = tuple(draw(st.lists(st.sampled_from([1, 2, 3, 5, 8]), max_size=5)))
    return draw(views(shape)), draw(views(shape))


def _offsets(t: torch.Tensor, shape: tuple[int, ...]) -> np.ndarray:
    """Element offsets from t's first element, for each output element in order."""
    e = t.expand(shape)
    grids = np.indices(shape, dtype=np.int64).reshape(len(shape), -1) if shape else np.zeros((0, 1), np.int64)
    return (np.array(e.stride(), dtype=np.int64)[:, None] * grids).sum(axis=0)


@settings(max_examples=200, deadline=None)
@given(operands())
def test_layout_reads_the_same_elements(pair):
    a, b = pair
    shape = broadcast_shape(a.shape, b.shape)
    plan = layout(a, b)
    assert math.prod(plan.sizes) == math.prod(shape)
    assert all(n > 1 for n in plan.sizes) or plan.sizes in ((0,), (1,))
    if plan.sizes in ((0,), (1,)):
        return
    coords = np.indices(plan.sizes, dtype=np.int64).reshape(len(plan.sizes), -1)
    for t, strides in ((a, plan.a_strides), (b, plan.b_strides)):
        got = (np.array(strides, dtype=np.int64)[:, None] * coords).sum(axis=0)
        np.testing.assert_array_equal(got, _offsets(t, shape))


@settings(max_examples=200, deadline=None)
@given(operands())
def test_cuda_strided_index_arithmetic(pair):
    """add_strided32's per-element arithmetic, replayed with its own arguments."""
    a, b = pair
    plan = layout(a, b)
    if plan.contiguous or len(plan.sizes) > MAX_DIMS:
        return
    args = dim_args(plan)
    dims = [args[i:i + 5] for i in range(0, len(args), 5)]
    index = np.arange(math.prod(plan.sizes), dtype=np.uint64)
    rest, offset_a, offset_b = index.copy(), np.zeros_like(index, np.int64), np.zeros_like(index, np.int64)
    for size, magic, shift, stride_a, stride_b in dims[:len(plan.sizes)]:
        q = (((rest * np.uint64(magic)) >> np.uint64(32)) + rest) >> np.uint64(shift)
        coord = (rest - q * np.uint64(size)).astype(np.int64)
        offset_a += coord * int(stride_a)
        offset_b += coord * int(stride_b)
        rest = q
    shape = broadcast_shape(a.shape, b.shape)
    np.testing.assert_array_equal(offset_a, _offsets(a, shape))
    np.testing.assert_array_equal(offset_b, _offsets(b, shape))


@pytest.mark.parametrize("d", [1, 2, 3, 7, 1023, 4096, 4097, 65535, 2**30 + 1, 2**31 - 1])
def test_divider_divides(d):
    magic, shift = divider(d)
    assert 0 < magic < 2**32
    for i in {0, 1, d - 1, d, d + 1, 2 * d - 1, 2**31 - 2, 2**31 - 1, 123456789}:
        if 0 <= i < 2**31:
            assert (((i * magic) >> 32) + i) >> shift == i // d


_PLUGINS = ["python", "openmp"] + (["triton"] if triton_backend.interpreting() else [])


@pytest.mark.parametrize("plugin", _PLUGINS)
@settings(max_examples=40, deadline=None)
@given(pair=operands(), alpha=st.sampled_from([1, 0.5, -3.0]))
def test_random_views_against_reference(plugin, pair, alpha):
    impl = registry.impl("add", plugin)
    if not registry.availability(impl):
        pytest.skip(registry.availability(impl).reason)
    op = registry.op("add")
    call = op.check(*pair, alpha=alpha)
    first = impl.config({k: v[0] for k, v in impl.config_space.items()})
    for config in (impl.config(), first):
        with poison_outputs():
            out = impl.run(call, config)
        assert check_close(out, op.reference(call), op.tolerance(call)) is None, call.describe()
