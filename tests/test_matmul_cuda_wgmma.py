"""matmul's Hopper kernel (cuda plugin, WGMMA 1): which configs and calls it takes, that every specialization the
config space admits compiles for sm_90a without spills or serialized warpgroup MMAs (NVRTC, no GPU needed), and on
an sm_90 GPU its results against the float64 reference: odd and aligned sizes, batches, broadcasts, transposed
operands, both 16-bit dtypes, several configs."""

from __future__ import annotations

import itertools
import re
import zlib

import pytest
import torch

from kernelzoo.backends import cuda
from kernelzoo.errors import UnsupportedError
from kernelzoo.registry import dtype_name, registry

OP, IMPL = registry.op("matmul"), registry.impl("matmul", "cuda")
H100_SHARED = 227 * 1024
HALF_TYPES = (torch.float16, torch.bfloat16)


def wgmma(**overrides: int) -> dict:
    return IMPL.config({"WGMMA": 1, "BK": 64, **overrides})


def admitted() -> list[dict]:
    """Every WGMMA point of the config space that the kernel takes and whose stages fit the H100's shared memory."""
    out = []
    space = IMPL.config_space
    for bm, bn, stages, consumers, store in itertools.product(space["BM"], space["BN"], space["STAGES"],
                                                              space["CONSUMERS"], space["TMA_STORE"]):
        config = wgmma(BM=bm, BN=bn, STAGES=stages, CONSUMERS=consumers, TMA_STORE=store)
        try:
            if IMPL.wgmma_shape(config)[1] <= H100_SHARED:
                out.append(config)
        except UnsupportedError:
            pass
    return out


def test_the_default_stays_on_the_mma_sync_kernels():
    assert IMPL.config()["WGMMA"] == 0
    assert IMPL.target(IMPL.config(), "sm_90") == "sm_90"
    assert IMPL.target(wgmma(), "sm_90") == "sm_90a"


def test_the_tuning_seeds_are_admitted_points_of_the_space():
    configs = admitted()
    for seed in IMPL.tuning_seeds:
        assert IMPL.in_space(IMPL.config(seed)) and IMPL.config(seed) in configs


@pytest.mark.parametrize(("overrides", "match"), [
    ({"BM": 256, "BN": 256, "CONSUMERS": 2}, "256 accumulators"),
    ({"BM": 128, "BN": 256, "CONSUMERS": 1}, "256 accumulators"),
    ({"BM": 64, "CONSUMERS": 2}, "32 rows"),
    ({"WM": 32}, "WGMMA runs WM 64 only"),
    ({"BK": 32}, "WGMMA runs BK 64 only"),
])
def test_configs_the_kernel_cannot_take_are_rejected(overrides, match):
    with pytest.raises(UnsupportedError, match=match):
        IMPL.wgmma_shape(wgmma(**overrides))


def test_threads_and_shared_memory_of_a_config():
    # a producer warpgroup and two consumers; 1 KiB of alignment, 4 stages of 128·64 + 64·256 elements, 8 mbarriers
    assert IMPL.wgmma_shape(wgmma(BM=128, BN=256, STAGES=4, CONSUMERS=2)) == (384, 1024 + 4 * 384 * 128 + 64)
    assert IMPL.wgmma_shape(wgmma(BM=128, BN=128, STAGES=5, CONSUMERS=1)) == (256, 1024 + 5 * 256 * 128 + 80)
    assert IMPL.wgmma_shape(wgmma(BM=128, BN=256, STAGES=5, CONSUMERS=2))[1] > H100_SHARED
    # TMA_STORE: two 64×64 staging tiles a consumer
    assert IMPL.wgmma_shape(wgmma(BM=256, BN=128, STAGES=4, CONSUMERS=2, TMA_STORE=1)) == (
        384, 1024 + 4 * 384 * 128 + 2 * 2 * 8192 + 64)


@pytest.mark.parametrize(("a_shape", "b_shape", "dtype", "match"), [
    ((33, 64), (64, 40), torch.float32, "float16 and bfloat16"),
    ((33, 60), (60, 40), torch.float16, "K = 60 and N = 40"),
    ((33, 64), (64, 36), torch.bfloat16, "K = 64 and N = 36"),
])
def test_calls_the_kernel_cannot_take_say_why(a_shape, b_shape, dtype, match):
    call = OP.check(torch.zeros(a_shape, dtype=dtype), torch.zeros(b_shape, dtype=dtype))
    assert match in IMPL.wgmma_unsupported(call)


@pytest.mark.parametrize("overrides", [{"CONSUMERS": 2}, {"TMA_STORE": 1}])
def test_the_hopper_kernel_s_entries_are_refused_by_the_others(overrides):
    call = OP.check(torch.zeros(8, 8, dtype=torch.float16), torch.zeros(8, 8, dtype=torch.float16))
    with pytest.raises(UnsupportedError, match="CONSUMERS and TMA_STORE are the Hopper kernel's"):
        IMPL.run(call, IMPL.config(overrides))


@pytest.mark.skipif(not cuda.compile_available()[0], reason="NVRTC not available")
@pytest.mark.parametrize("dtype", HALF_TYPES, ids=dtype_name)
@pytest.mark.parametrize("config", admitted(),
                         ids=lambda c: f"{c['BM']}x{c['BN']}-s{c['STAGES']}-c{c['CONSUMERS']}-t{c['TMA_STORE']}")
def test_every_specialization_compiles_without_spills_or_serialized_mmas(config, dtype):
    """ptxas keeps the accumulators in registers and the warpgroup MMAs asynchronous: it says so when it must
    serialize them (C7510, "wgmma.mma_async instructions are serialized") or spill."""
    cubin = cuda.compile_cubin(IMPL.read_source("cuda.cu"), defines=IMPL.defines(dtype, config),
                               options=["--ptxas-options=-v"], arch=IMPL.target(config, "sm_90"), name="cuda.cu")
    log = cuda.last_log()
    assert cubin[:4] == b"\x7fELF"
    assert "matmul_wgmma" in log
    assert "serialized" not in log and "arning" not in log, log
    assert [int(n) for n in re.findall(r"(\d+) bytes spill stores", log)] == [0], log


# --- on an sm_90 GPU ---------------------------------------------------------------------------------------------

HOPPER = torch.cuda.is_available() and torch.cuda.get_device_capability() == (9, 0)
on_hopper = pytest.mark.skipif(not HOPPER, reason="the WGMMA kernel runs on sm_90 (Hopper) GPUs only")
GPU_CONFIGS = [pytest.param(IMPL.config(seed), id=f"seed{i}") for i, seed in enumerate(IMPL.tuning_seeds)] + [
    pytest.param(wgmma(BM=64, BN=256, STAGES=3, CONSUMERS=1), id="64x256-s3-c1"),
    pytest.param(wgmma(BM=128, BN=64, STAGES=4, CONSUMERS=2, TMA_STORE=1), id="128x64-s4-c2-t1"),
    pytest.param(wgmma(BM=256, BN=64, STAGES=3, CONSUMERS=2), id="256x64-s3-c2"),
    pytest.param(wgmma(BM=64, BN=128, STAGES=3, CONSUMERS=1, TMA_STORE=1), id="64x128-s3-c1-t1"),
]


def check(a: torch.Tensor, b: torch.Tensor, config: dict) -> None:
    call = OP.check(a, b)
    assert IMPL.wgmma_unsupported(call) is None
    out = IMPL.run(call, config)
    mismatch = OP.verify(call, out, OP.reference(call))
    assert mismatch is None, f"{call.describe()} with {config}: {mismatch}"


@on_hopper
@pytest.mark.parametrize("dtype", HALF_TYPES, ids=dtype_name)
@pytest.mark.parametrize("config", GPU_CONFIGS)
@pytest.mark.parametrize("mnk", [(1, 8, 8), (17, 24, 40), (200, 136, 264), (1000, 1032, 72), (255, 520, 1000),
                                 (4096, 4096, 4096), (1031, 2056, 8192)], ids=lambda s: "x".join(map(str, s)))
def test_matches_the_reference(mnk, config, dtype):
    m, n, k = mnk
    g = torch.Generator(device="cuda").manual_seed(zlib.crc32(repr(mnk).encode()))
    a = torch.randn(m, k, device="cuda", dtype=dtype, generator=g)
    b = torch.randn(k, n, device="cuda", dtype=dtype, generator=g)
    check(a, b, config)


@on_hopper
@pytest.mark.parametrize("dtype", HALF_TYPES, ids=dtype_name)
@pytest.mark.parametrize("config", GPU_CONFIGS)
@pytest.mark.parametrize("layout", ["batched", "broadcast-a", "broadcast-b-2d", "transposed-a", "transposed-b",
                                    "offset"])
def test_layouts_match_the_reference(layout, config, dtype):
    g = torch.Generator(device="cuda").manual_seed(zlib.crc32(layout.encode()))

    def r(*shape: int) -> torch.Tensor:
        return torch.randn(shape, device="cuda", dtype=dtype, generator=g)

    a, b = {
        "batched": lambda: (r(3, 130, 72), r(3, 72, 264)),
        "broadcast-a": lambda: (r(1, 130, 72), r(3, 72, 264)),
        "broadcast-b-2d": lambda: (r(3, 130, 72), r(72, 264)),
        "transposed-a": lambda: (r(72, 130).t(), r(72, 264)),
        "transposed-b": lambda: (r(130, 72), r(264, 72).t()),
        "offset": lambda: (r(130 * 72 + 1)[1:].view(130, 72), r(72 * 264 + 1)[1:].view(72, 264)),
    }[layout]()
    check(a, b, config)


@on_hopper
@pytest.mark.parametrize("config", GPU_CONFIGS)
def test_the_op_s_cases_match_the_reference(config):
    """The conformance suite's cases on this config, those with 16-byte aligned rows (others are refused)."""
    for case in OP.cases():
        for dtype in HALF_TYPES:
            generator = torch.Generator().manual_seed(zlib.crc32(case.id.encode()))
            args, kwargs = case.make(torch.device("cuda"), dtype, generator)
            call = OP.check(*args, **kwargs)
            if IMPL.wgmma_unsupported(call):
                with pytest.raises(UnsupportedError):
                    IMPL.run(call, config)
                continue
            mismatch = OP.verify(call, IMPL.run(call, config), OP.reference(call))
            assert mismatch is None, f"{case.id} {call.describe()} with {config}: {mismatch}"


@on_hopper
def test_k_zero_gives_zeros():
    a = torch.empty(130, 0, device="cuda", dtype=torch.float16)
    b = torch.empty(0, 72, device="cuda", dtype=torch.float16)
    out = IMPL.run(OP.check(a, b), IMPL.config(IMPL.tuning_seeds[0]))
    assert out.shape == (130, 72) and not out.any()
