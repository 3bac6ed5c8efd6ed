"""scaled_matmul's cuda plugin (matmul's Hopper kernel on 8-bit floats): which configs it takes, that every
specialization compiles for sm_90a without spills or serialized warpgroup MMAs (NVRTC, no GPU needed) and that
matmul's Hopper kernel still does, and on an sm_90 GPU its results against the float64 reference through the op's
own verify: both kinds of scales, bias, every out_dtype, e4m3 and e5m2, odd M and N, K off the 128-deep step."""

from __future__ import annotations

import itertools
import re
import zlib

import pytest
import torch
from kernelzoo_plugins._gemm.hopper import k_major
from kernelzoo_plugins.scaled_matmul import _inputs, out_dtype

from kernelzoo.backends import cuda
from kernelzoo.errors import UnsupportedError
from kernelzoo.registry import dtype_name, registry

OP, IMPL = registry.op("scaled_matmul"), registry.impl("scaled_matmul", "cuda")
MATMUL = registry.impl("matmul", "cuda")
H100_SHARED = 227 * 1024
E4M3, E5M2 = torch.float8_e4m3fn, torch.float8_e5m2
needs_nvrtc = pytest.mark.skipif(not cuda.compile_available()[0], reason="NVRTC not available")


def admitted() -> list[dict]:
    """Every point of the config space that the kernel takes and whose stages fit the H100's shared memory."""
    out = []
    for values in itertools.product(*IMPL.config_space.values()):
        config = IMPL.config(dict(zip(IMPL.config_space, values)))
        try:
            if IMPL.kernel_shape(config)[1] <= H100_SHARED:
                out.append(config)
        except UnsupportedError:
            pass
    return out


def label(c: dict) -> str:
    return f"{c['BM']}x{c['BN']}-s{c['STAGES']}-c{c['CONSUMERS']}-t{c['TMA_STORE']}-p{c['PROMOTE_K']}-o{c['OVERLAP']}"


def test_the_default_and_the_seeds_are_admitted_points_of_the_space():
    configs = admitted()
    for config in (IMPL.config(), *(IMPL.config(seed) for seed in IMPL.tuning_seeds)):
        assert IMPL.in_space(config) and config in configs, config
    assert IMPL.target(IMPL.config(), "sm_90") == IMPL.target(IMPL.config(), "sm_80") == "sm_90a"


@pytest.mark.parametrize(("overrides", "out", "match"), [
    ({"BM": 128, "BN": 256, "CONSUMERS": 2, "OVERLAP": 0}, torch.bfloat16, "128 wgmma accumulators a set and 2 sets"),
    ({"BM": 128, "BN": 128, "CONSUMERS": 1, "OVERLAP": 0}, torch.bfloat16, "256 registers; 192 fit"),
    ({"BM": 128, "BN": 128, "CONSUMERS": 1}, torch.bfloat16, "3 sets .* 384 registers; 192 fit"),
    ({"BM": 256, "BN": 128, "CONSUMERS": 2, "OVERLAP": 1}, torch.bfloat16, "3 sets .* 384 registers; 192 fit"),
    ({"BM": 64, "CONSUMERS": 2}, torch.bfloat16, "32 rows; a warpgroup takes whole m64 blocks"),
    ({"TMA_STORE": 1}, torch.float32, "TMA_STORE stores 16-bit outputs"),
])
def test_configs_the_kernel_cannot_take_are_rejected(overrides, out, match):
    with pytest.raises(UnsupportedError, match=match):
        IMPL.kernel_shape(IMPL.config(overrides), out)


def test_threads_and_shared_memory_of_a_config():
    # a producer warpgroup and two consumers; 1 KiB of alignment, 6 stages of (128 + 128) rows of 128 bytes,
    # 12 mbarriers
    assert IMPL.kernel_shape(IMPL.config()) == (384, 1024 + 6 * 256 * 128 + 96)
    # TMA_STORE: two 64×64 staging tiles of 16-bit outputs a consumer
    assert IMPL.kernel_shape(IMPL.config({"TMA_STORE": 1}), torch.float16) == (384, 1024 + 6 * 256 * 128 + 32768 + 96)
    assert IMPL.kernel_shape(IMPL.config({"BM": 64, "BN": 128, "CONSUMERS": 1, "STAGES": 3})) == (
        256, 1024 + 3 * 192 * 128 + 48)


def test_off_the_gpu_it_says_why():
    a, b, scale_a, scale_b = _inputs(17, 33, 65, "cpu", E4M3, torch.Generator().manual_seed(0))[0]
    assert IMPL.supports(OP.check(a, b, scale_a, scale_b)) == "runs on cuda, not cpu"


@pytest.mark.skipif(cuda.available()[0], reason="the CUDA driver loads here")
def test_without_a_driver_the_plugin_is_unavailable_with_the_reason():
    availability = registry.availability(IMPL)
    assert not availability and availability.reason == cuda.available()[1] != ""


def test_defines_name_the_output_and_operand_types():
    defines = IMPL.defines(E4M3, {**IMPL.config(), "out": "float32", "b": "float8_e5m2", "SCALE_ROWS": 1})
    assert (defines["T"], defines["A_F8"], defines["B_F8"], defines["SCALE_ROWS"]) == ("float", "kz_e4m3", "kz_e5m2", 1)
    assert "out" not in defines and "b" not in defines
    defines = IMPL.defines(E5M2, IMPL.config())
    assert (defines["T"], defines["A_F8"], defines["B_F8"]) == ("kz_bf16", "kz_e5m2", "kz_e5m2")


@pytest.mark.parametrize(("make", "copied"), [
    (lambda: torch.zeros(40, 64).to(E4M3), False),                     # rows 64 bytes apart
    (lambda: torch.zeros(40, 80).to(E4M3)[:, :64], False),             # rows of a wider matrix (stride 80)
    (lambda: torch.zeros(1, 65).to(E4M3), False),                      # one row: never stepped along
    (lambda: torch.zeros(40, 65).to(E4M3), True),                      # K = 65: rows 65 bytes apart
    (lambda: torch.zeros(64, 40).to(E4M3).t(), True),                  # column-major
    (lambda: torch.zeros(40 * 64 + 1).to(E4M3)[1:].view(40, 64), True),  # one byte past an aligned address
])
def test_operands_are_read_k_major_as_they_lie_or_from_a_padded_copy(make, copied):
    t = make()
    t.copy_(torch.randn(t.shape, generator=torch.Generator().manual_seed(1)).to(E4M3))
    view = k_major(t.unsqueeze(0))[0]  # the Hopper kernel's host helper, as the plugin calls it
    assert (view.data_ptr() != t.data_ptr()) == copied
    assert view.stride(1) == 1 and view.data_ptr() % 16 == 0 and (view.stride(0) % 16 == 0 or view.shape[0] == 1)
    assert torch.equal(view.float(), t.float())


def ptxas_checked(source: str, defines: dict, name: str) -> None:
    """Compile for sm_90a and check ptxas's report: no warning (C7510 says "wgmma.mma_async instructions are
    serialized"), no spill."""
    cubin = cuda.compile_cubin(source, defines=defines, options=["--ptxas-options=-v"], arch="sm_90a", name=name)
    log = cuda.last_log()
    assert cubin[:4] == b"\x7fELF"
    assert "serialized" not in log and "arning" not in log, log
    assert [int(n) for n in re.findall(r"(\d+) bytes spill stores", log)] == [0], log


@needs_nvrtc
@pytest.mark.parametrize("config", admitted(), ids=label)
def test_every_specialization_compiles_without_spills_or_serialized_mmas(config):
    ptxas_checked(IMPL.read_source("cuda.cu"), IMPL.defines(E4M3, config), "cuda.cu")


@needs_nvrtc
@pytest.mark.parametrize(("a_dtype", "specialization"), [
    (E4M3, {"out": "float32", "SCALE_ROWS": 1, "BIAS": 1}),
    (E4M3, {"out": "float16", "SCALE_ROWS": 1, "BIAS": 1, "b": "float8_e5m2"}),
    (E5M2, {"out": "bfloat16", "BIAS": 1, "b": "float8_e4m3fn"}),
], ids=["float32-row-bias", "float16-row-bias-b-e5m2", "a-e5m2-bias"])
@pytest.mark.parametrize("seed", range(len(IMPL.tuning_seeds) + 1), ids=lambda i: f"seed{i}" if i else "default")
def test_output_types_scales_bias_and_operand_kinds_compile_without_spills(seed, a_dtype, specialization):
    config = IMPL.config(IMPL.tuning_seeds[seed - 1] if seed else None)
    if config["TMA_STORE"] and specialization["out"] == "float32":  # staged 128-byte lines hold 16-bit outputs
        with pytest.raises(UnsupportedError, match="TMA_STORE stores 16-bit outputs"):
            IMPL.kernel_shape(config, torch.float32)
        return
    ptxas_checked(IMPL.read_source("cuda.cu"), IMPL.defines(a_dtype, {**config, **specialization}), "cuda.cu")


@needs_nvrtc
@pytest.mark.parametrize("dtype", (torch.float16, torch.bfloat16), ids=dtype_name)
@pytest.mark.parametrize("seed", range(len(MATMUL.tuning_seeds)), ids=lambda i: f"seed{i}")
def test_matmul_s_hopper_kernel_still_compiles_without_spills(seed, dtype):
    """The kernel is matmul's too (SCALED 0): its seeds compile as before."""
    config = MATMUL.config(MATMUL.tuning_seeds[seed])
    ptxas_checked(MATMUL.read_source("cuda.cu"), MATMUL.defines(dtype, config), "cuda.cu")


# --- on an sm_90 GPU ---------------------------------------------------------------------------------------------

HOPPER = torch.cuda.is_available() and torch.cuda.get_device_capability() == (9, 0)
on_hopper = pytest.mark.skipif(not HOPPER, reason="the Hopper kernel runs on sm_90 GPUs only")
GPU_CONFIGS = [
    pytest.param(IMPL.config(seed), id=f"seed{i}") for i, seed in enumerate(IMPL.tuning_seeds)] + [
    pytest.param(IMPL.config({"BM": 64, "BN": 64, "STAGES": 3, "CONSUMERS": 1}), id="64x64-s3-c1"),
    pytest.param(IMPL.config({"BM": 128, "BN": 64, "CONSUMERS": 2, "TMA_STORE": 1, "STAGES": 4}), id="128x64-c2-t1"),
    pytest.param(IMPL.config({"BM": 64, "BN": 128, "CONSUMERS": 1, "STAGES": 4, "PROMOTE_K": 256}),
                 id="64x128-c1-p256"),
    pytest.param(IMPL.config({"BM": 256, "BN": 64, "STAGES": 5, "PROMOTE_K": 256, "OVERLAP": 1}),
                 id="256x64-p256-overlap"),
]


def check(call, config: dict) -> None:
    (m, k), n = call.inputs["a"].shape, call.inputs["b"].shape[1]
    if config["TMA_STORE"] and m * n * k and (out_dtype(call).itemsize != 2 or n % 8):
        with pytest.raises(UnsupportedError, match="TMA_STORE"):
            IMPL.run(call, config)
        return
    out = IMPL.run(call, config)
    mismatch = OP.verify(call, out, OP.reference(call))
    assert mismatch is None, f"{call.describe()} with {config}: {mismatch}"


# K: less than a k-tile, a k-tile and a bit, whole runs of OVERLAP_RUN intervals (1000: two at PROMOTE_K 128),
# intervals only (200), runs and intervals left over (4736: 37 k-tiles)
SIZES = [(1, 16, 16), (17, 33, 65), (255, 520, 1000), (1000, 1032, 200), (257, 1025, 4736)]


def gpu_call(mnk: tuple[int, int, int], a_dtype: torch.dtype = E4M3, b_dtype: torch.dtype = E4M3, *,
             scales: str = "tensor", out: str = "bfloat16", bias: bool = False):
    g = torch.Generator().manual_seed(zlib.crc32(repr((mnk, scales, a_dtype, b_dtype)).encode()))
    args, kwargs = _inputs(*mnk, "cuda", a_dtype, g, scales=scales, out=getattr(torch, out), bias=bias,
                           b_dtype=b_dtype, magnitude=3.0)
    return OP.check(*args, **kwargs)


@on_hopper
@pytest.mark.parametrize("scales", ["tensor", "row"])
@pytest.mark.parametrize("out", ["bfloat16", "float16", "float32"])
@pytest.mark.parametrize("bias", [False, True], ids=["plain", "bias"])
@pytest.mark.parametrize(("a_dtype", "b_dtype"), [(E4M3, E4M3), (E4M3, E5M2), (E5M2, E4M3)],
                         ids=["e4m3", "b-e5m2", "a-e5m2"])
@pytest.mark.parametrize("mnk", SIZES, ids=lambda s: "x".join(map(str, s)))
def test_the_default_matches_the_reference(mnk, a_dtype, b_dtype, bias, out, scales):
    check(gpu_call(mnk, a_dtype, b_dtype, scales=scales, out=out, bias=bias), IMPL.config())


@on_hopper
@pytest.mark.parametrize("config", GPU_CONFIGS)
@pytest.mark.parametrize("scales", ["tensor", "row"])
@pytest.mark.parametrize("mnk", SIZES[1:], ids=lambda s: "x".join(map(str, s)))
def test_other_configs_match_the_reference(mnk, scales, config):
    check(gpu_call(mnk, scales=scales, bias=True), config)


@on_hopper
@pytest.mark.parametrize("config", [GPU_CONFIGS[0], GPU_CONFIGS[-1]])
def test_the_op_s_cases_match_the_reference(config):
    """The conformance suite's cases (other layouts, sliced views, empty dims, K = 0 with bias) on this config."""
    for case in OP.cases():
        for dtype in (E4M3, E5M2):
            generator = torch.Generator().manual_seed(zlib.crc32(case.id.encode()))
            args, kwargs = case.make(torch.device("cuda"), dtype, generator)
            check(OP.check(*args, **kwargs), config)


@on_hopper
@pytest.mark.parametrize("scales", ["tensor", "row"])
def test_long_sums_stay_within_the_tolerance_at_4096_deep(scales):
    """K = 4096 at 4096×4096: the sums promoted once a k-tile (and every other one), with or without the
    promotion overlapped, stay inside the op's FP8 accumulation allowance, which sums never promoted miss."""
    g = torch.Generator().manual_seed(7)
    args, kwargs = _inputs(4096, 4096, 4096, "cuda", E4M3, g, scales=scales)
    call = OP.check(*args, **kwargs)
    ref = OP.reference(call)
    for promote, overlap in itertools.product((128, 256), (0, 1)):
        out = IMPL.run(call, IMPL.config({"PROMOTE_K": promote, "OVERLAP": overlap}))
        assert OP.verify(call, out, ref) is None, (promote, overlap)


@on_hopper
def test_tma_store_refuses_rows_it_cannot_align():
    g = torch.Generator().manual_seed(3)
    args, kwargs = _inputs(64, 36, 64, "cuda", E4M3, g)
    with pytest.raises(UnsupportedError, match="N = 36 is not a multiple of 8"):
        IMPL.run(OP.check(*args, **kwargs), IMPL.config({"TMA_STORE": 1}))
