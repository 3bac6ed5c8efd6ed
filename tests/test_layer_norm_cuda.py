"""layer_norm's and layer_norm_backward's cuda row kernels against the reference, with and without the next row
prefetched (PREFETCH), on grids small enough that each warp, block or cluster walks several rows (the conformance
cases give most of them one row, and run the default config, which does not prefetch; the forward's walks rows only
in the warp and block kernels), and the backward's blocks adding their partial rows in clusters (PART_CLUSTER).
GPU only."""

from __future__ import annotations

import pytest
import torch

from kernelzoo.registry import registry

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="the cuda plugin's kernels need a CUDA GPU")

# (rows, n): a warp per row (n <= 32 * ITEMS), a block per row, a cluster of blocks per row (sm_90, n > THREADS *
# ITEMS), odd lengths (scalar accesses), one row per group
SHAPES = [(2000, 30), (1500, 1000), (777, 999), (600, 5000), (301, 4099), (3, 1000), (1, 257)]
# (THREADS, ITEMS, blocks_per_sm): a row by a warp, a block of up to 256 threads or a cluster; one or two blocks an SM
CONFIGS = [(128, 1, 1), (128, 8, 1), (512, 8, 2), (256, 4, 1)]
# with and without the next row prefetched; the backward's blocks of a row also adding their partial rows in
# clusters of 2 and 8 (sm_90; grids rounded up to whole clusters, so some blocks take no row)
WAYS = {"layer_norm": [{"PREFETCH": 0}, {"PREFETCH": 1}],
        "layer_norm_backward": [{"PREFETCH": 0}, {"PREFETCH": 1}, {"PREFETCH": 0, "PART_CLUSTER": 2},
                                {"PREFETCH": 1, "PART_CLUSTER": 8}]}


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: f"{s[0]}x{s[1]}")
@pytest.mark.parametrize("name", ["layer_norm", "layer_norm_backward"])
def test_prefetching_rows_match_the_reference(name, shape, dtype):
    op, impl = registry.op(name), registry.impl(name, "cuda")
    call = op.example(shape, dtype, "cuda", torch.Generator().manual_seed(shape[0] * 7919 + shape[1]))
    ref = op.reference(call)
    for threads, items, per_sm in CONFIGS:
        for way in WAYS[name]:
            config = impl.config({"THREADS": threads, "ITEMS": items, "blocks_per_sm": per_sm, **way})
            mismatch = op.verify(call, impl.run(call, config), ref)
            assert mismatch is None, f"{call.describe()} with {config}: {mismatch}"
