"""The cuda layer_norm's streaming kernel (ln_stream, RING > 0): rows split over a cluster whose blocks take
successive rows through a ring of bulk copies in shared memory. The conformance suite runs the default and
first configs (RING 0), so these cases cover it: rows over a few clusters and over many (the ring wraps, rows
not a multiple of the clusters), blocks past a row's end, weight and bias or neither, rows any stride apart,
against the float64 reference. The compile checks need only NVRTC."""

from __future__ import annotations

import re

import pytest
import torch

from kernelzoo.backends import cuda
from kernelzoo.registry import registry

IMPL = registry.impl("layer_norm", "cuda")
OP = registry.op("layer_norm")
STREAM = {"THREADS": 128, "ITEMS": 8, "CLUSTER": 4}  # 1024 columns a block, up to 4096 a row


def compile_log(dtype: str, config: dict) -> str:
    cuda.compile_cubin(IMPL.read_source("cuda.cu"), defines={"T": dtype, **config},
                       options=["--ptxas-options=-v"], arch="sm_90", name="cuda.cu")
    return cuda.last_log()


@pytest.mark.skipif(not cuda.compile_available()[0], reason="NVRTC not available")
@pytest.mark.parametrize("config", [{"THREADS": 512, "ITEMS": 32, "CLUSTER": 4, "RING": 2},
                                    {"THREADS": 256, "ITEMS": 32, "CLUSTER": 8, "RING": 3},
                                    {"THREADS": 512, "ITEMS": 16, "CLUSTER": 8, "RING": 2}])
def test_the_streaming_kernel_compiles_without_spill(config):
    """NVRTC 13.0 and 13.5, fp32: 63-128 registers (its bounds leave it 8 more than ln_cluster's), no spill."""
    log = compile_log("float", config)
    spills = re.search(r"Function properties for ln_stream_vec\n.*?(\d+) bytes spill stores", log)
    assert spills is not None and spills.group(1) == "0", log


@pytest.mark.skipif(not cuda.compile_available()[0], reason="NVRTC not available")
def test_ring_0_builds_no_streaming_kernel():
    assert "ln_stream_vec" not in compile_log("float", {**STREAM, "RING": 0})
    assert "ln_stream_vec" in compile_log("float", {**STREAM, "RING": 2})


needs_sm90 = pytest.mark.skipif(not torch.cuda.is_available() or torch.cuda.get_device_capability() < (9, 0),
                                reason="the streaming kernel runs on sm_90 (thread-block clusters, bulk copies)")


@needs_sm90
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("ring", [2, 3])
@pytest.mark.parametrize(("rows", "n", "affine"), [
    (1, 4096, True),        # one row: one cluster
    (777, 4096, True),      # many rows a cluster, not a multiple of the clusters
    (300, 2056, False),     # a cluster of 4: the third block holds 8 columns, the fourth none; no weight, no bias
    (129, 1032, True),      # a cluster of 2 (row_cluster takes the fewest), the second block holding 8 columns
    (64, 3000, True),       # the third block holds 952 columns, the fourth none
    (50, 3001, True),       # rows not 16-byte packed: ln_cluster runs instead
])
def test_the_streaming_kernel_matches_float64(dtype, ring, rows, n, affine):
    generator = torch.Generator().manual_seed(rows * n + ring)
    x = torch.randn(rows, n, generator=generator, dtype=torch.float64).mul_(3).add_(5).to("cuda", dtype)
    weight, bias = (torch.randn(n, generator=generator).to("cuda", dtype) for _ in range(2)) if affine else (None, None)
    call = OP.check(x, n, weight, bias)
    config = IMPL.config({**STREAM, "RING": ring})
    out = IMPL.run(call, config)
    assert OP.verify(call, out, OP.reference(call)) is None


@needs_sm90
def test_the_streaming_kernel_reads_rows_any_stride_apart():
    generator = torch.Generator().manual_seed(1)
    base = torch.randn(200, 4096 + 64, generator=generator).cuda()
    x = base[:, 32:32 + 4096]  # rows 4160 elements apart, 16-byte aligned
    call = OP.check(x, 4096)
    out = IMPL.run(call, IMPL.config({**STREAM, "RING": 2}))
    assert OP.verify(call, out, OP.reference(call)) is None
